"""Analysis on top of the host driver: BERT timing by stage and op class (:mod:`.perf`), the
host CPU profile beside the accelerator (:mod:`.profile`) and SeqPoint projections
(:mod:`.seqpoint`)."""
