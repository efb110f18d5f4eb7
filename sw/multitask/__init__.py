"""Multi-task BERT: task models fine-tuned from one base and stored as compressed deltas.

:mod:`.rowdelta` (a task as a row-sparse int8 delta on the int8 base, and its file),
:mod:`.ondevice` (the delta run on the accelerator as extra K-rows of the same GEMMs),
:mod:`.fromweights` (a task's delta from its fine-tuned float weights).
docs/multitask.md has the measurements.
"""
