"""Multi-task BERT: task models fine-tuned from one base and stored as compressed deltas.

:mod:`.model` (the classifier), :mod:`.probe` (the base model's linear probe),
:mod:`.finetune` (the recipe and the cached checkpoints), :mod:`.deltas` (the per-task deltas,
their compression schemes and their sizes). docs/multitask.md has the measurements.
"""
