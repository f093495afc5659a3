"""Markdown, CSV and figures from results that the stages computed: formatting only, no training, no
accounting decisions. One figure helper (figures); one module per report."""
