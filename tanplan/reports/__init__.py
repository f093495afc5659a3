"""Markdown, CSV and figures from results that the stages computed: formatting only, no training, no
accounting decisions. One figure helper (figures); one module per report: plan (the planner), sweep, fit
(the batch law), ladder, optimize (the budget frontier), run (`tanplan run`), audit, baselines, and
pruning (accuracy against pruning and gradient-dropping rates, for sweep reports)."""
