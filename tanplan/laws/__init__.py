"""The JAX-free laws the stages fit: the batch law and its interval for one launch (batch_law: `tanplan fit`,
the ladder, `tanplan run`) and the accuracy law along the budget frontier (frontier_law: `tanplan optimize`).
Pure numpy and scipy on (B', accuracy) or (S, accuracy) pairs; they build the typed records of
tanplan.outcomes and train nothing (tanplan.workflow trains the proxies they are fitted on)."""
