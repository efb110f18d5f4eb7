"""Multi-task BERT: task models fine-tuned from one base and stored as compressed deltas.

:mod:`.model` (the classifier), :mod:`.probe` (the base model's linear probe),
:mod:`.finetune` (the recipe and the cached checkpoints, full and row-sparse),
:mod:`.activations` (each K-row's input energy), :mod:`.deltas` (the per-task deltas, their
compression schemes and their sizes), :mod:`.store` (a task's delta file: int8 K-rows in the
base's units), :mod:`.suite` (``bertaccel multitask build | eval | run``);
:mod:`.rowdelta` (a task as a row-sparse int8 delta on the int8 base, and its file),
:mod:`.ondevice` (the delta run on the accelerator as extra K-rows of the same GEMMs),
:mod:`.reference` (a task's merged-weight reference model, and random tasks),
:mod:`.fromweights` (a task's delta from its fine-tuned float weights).
docs/multitask.md has the measurements.
"""
