"""Real BERT models on the accelerator: load (:mod:`.load`), quantise (:mod:`.quant`), compile
(:mod:`.compile`), run (:mod:`.run`), and embed text end to end (:mod:`.text`)."""

from .compile import STAGES, BertProgram, compile_bert, model_macs, stage_macs
from .load import MINILM, BertError, BertSpec, load_bert
from .progress import TextProgress
from .run import BertResult, Runner, embed_texts, layer_programs, run_bert, run_layer

__all__ = ["BertError", "BertSpec", "BertProgram", "BertResult", "MINILM", "load_bert",
           "model_macs", "stage_macs", "compile_bert", "run_bert", "run_layer", "layer_programs",
           "embed_texts", "Runner", "TextProgress", "STAGES"]
