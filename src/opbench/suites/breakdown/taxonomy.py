"""One operator taxonomy for every framework: which of opbench's families a profiled operator
belongs to, from the name its framework's profiler gives it.

Names are matched against ordered patterns, first the operator's type (TensorFlow: after the
last ':', the rest is its name scope, which is tried next: a BiasAdd inside `conv2d_1/` is the
convolution's). What matches nothing is "other" and is listed by name in the report, never
folded away; step time no operator covers is "unattributed" (opbench.suites.breakdown.attribution).
"""

from __future__ import annotations

import re

from opbench.core.schema import FAMILIES

LABELS = dict(FAMILIES)

_COPY = r"flatten|reshape|view|transpose|permute|copy|contiguous|clone|concat\w*|\bcat\b|stack|slice|squeeze|" \
        r"broadcast|bitcast|\bpad\b|identity|\bto\b|_to_copy|detach|accumulategrad|\bt\b|tbackward|" \
        r"empty|ones_like|zeros_like|fill|cast"
_PATTERNS = tuple((family, re.compile(pattern, re.IGNORECASE)) for family, pattern in (
    ("update", r"optimizer\.|_update$|adam|\bsgd\b|_foreach|resourceapply|assign\w*variableop"),
    ("loss", r"cross_?entropy|nll_?loss|log_?softmax|\bsoftmax|\bpick\b|logsoftmax|sparsesoftmax"),
    ("conv", r"conv"),
    ("recurrent", r"lstm|\brnn\b|mkldnnrnn|\bgru\b"),
    ("dense", r"linear|addmm|\bmm\b|mmbackward|matmul|\bgemm\b|\bdot\b|dot_general|fullyconnected|\bdense"),
    ("pooling", r"pool|reduce.window"),
    ("normalization", r"batch_?norm|layer_?norm|fusedbatchnorm|\bnorm\b"),
    ("activation", r"relu|\belu\b|tanh|sigmoid|gelu|softplus|softsign|threshold|\bactivation\b"),
    ("copy", _COPY),
))
_COPY_WORDS = re.compile(_COPY, re.IGNORECASE)
_FUSION_NOISE = {"fusion", "clone", "wrapped", "loop", "input", "kernel", ""}


def _match(text: str) -> str:
    # word boundaries at _, ., digits and separators: aten::mm, dot_general.3, conv2d_1/Relu
    text = re.sub(r"\.clone\b", "", text)  # XLA names a computation's copy name.clone
    words = re.sub(r"[_.:/#\-\d]+", " ", text)
    for family, pattern in _PATTERNS:
        if pattern.search(text) or pattern.search(words):
            return family
    return "other"


def classify(name: str, phase: str | None = None, fused: bool = False) -> str:
    """The family of a profiled operator. Everything the optimizer runs is its update, whatever
    the arithmetic; a fused kernel is "fused" unless its name shows only data movement
    (XLA's transpose_copy_fusion)."""
    if phase == "update":
        return "update"
    if fused:
        words = [w for w in re.split(r"[_.,\s\d]+", name.lower()) if w not in _FUSION_NOISE]
        return "copy" if words and all(_COPY_WORDS.fullmatch(w) for w in words) else "fused"
    op_type = name.rsplit(":", 1)[-1]
    family = _match(op_type)
    if family == "other" and op_type != name:
        family = _match(name.rsplit(":", 1)[0])
    return family
