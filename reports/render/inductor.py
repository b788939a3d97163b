"""The operators a TorchInductor (``torch.compile``) kernel fused, read from its name.

Inductor names a generated Triton kernel ``triton_<kind>_fused_<ops>_<n>``: its kind (``poi``
pointwise, ``red`` reduction, ``per`` persistent reduction, ``tem`` template, e.g. a GEMM,
``for`` foreach, ``spl`` split scan), the ATen operators of the nodes it fused, sorted and
joined by ``_``, and a counter. Operator names contain underscores themselves (``_to_copy``,
``native_layer_norm``), so the list is split at the longest known operator first:
``triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1`` fused ``to_copy, add, mean, mul, pow,
rsqrt``. People see ``fused: ...`` beside such a name (``reports.render.names``; a name
too long for its column loses its operator list first, ``shortened``); data keep the name
as nsys recorded it.
"""

from __future__ import annotations

import functools
import re

KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction",
         "tem": "template", "for": "foreach", "spl": "split scan"}
_NAME = re.compile(r"^triton_(?P<kind>[a-z]+)_fused_(?P<ops>.+?)_(?P<n>\d+)$")

# ATen operators with underscores in their names (the one-word ones need no entry).
_MULTI_WORD = """
_to_copy _unsafe_view _log_softmax _log_softmax_backward_data _softmax _softmax_backward_data
native_layer_norm native_layer_norm_backward native_group_norm native_group_norm_backward
native_batch_norm native_batch_norm_backward _native_batch_norm_legit
_native_batch_norm_legit_functional _native_batch_norm_legit_no_training native_dropout
native_dropout_backward _fused_dropout nll_loss_forward nll_loss_backward nll_loss2d_forward
nll_loss2d_backward embedding_dense_backward threshold_backward gelu_backward silu_backward
sigmoid_backward tanh_backward hardtanh_backward leaky_relu_backward elu_backward
softplus_backward mse_loss mse_loss_backward smooth_l1_loss binary_cross_entropy
binary_cross_entropy_with_logits var_mean index_put index_select index_add index_copy
scatter_add scatter_reduce masked_fill masked_scatter new_zeros new_ones new_empty new_full
zeros_like ones_like full_like empty_like rand_like randn_like clamp_min clamp_max
constant_pad_nd reflection_pad2d avg_pool2d avg_pool2d_backward max_pool2d_with_indices
max_pool2d_with_indices_backward adaptive_avg_pool2d _adaptive_avg_pool2d
_adaptive_avg_pool2d_backward convolution_backward slice_scatter select_scatter
diagonal_scatter as_strided_scatter scaled_dot_product_attention
_scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention
_scaled_dot_product_cudnn_attention _efficient_attention_backward _flash_attention_backward
lift_fresh_copy bitwise_and bitwise_or bitwise_xor bitwise_not logical_and logical_or
logical_not floor_divide true_divide upsample_nearest2d upsample_bilinear2d
_foreach_add _foreach_mul _foreach_addcmul _foreach_addcdiv _foreach_sqrt _foreach_div
_foreach_lerp _foreach_sub _foreach_neg _foreach_maximum _foreach_copy _foreach_pow
""".split()
_VOCAB = {tuple(op.split("_")) for op in _MULTI_WORD}
_LONGEST = max(len(v) for v in _VOCAB)


@functools.lru_cache(maxsize=4096)
def fused_ops(name: str) -> tuple[str, ...] | None:
    """The operators an Inductor kernel fused (without leading underscores, each once, in
    the name's order), or None for other names."""
    m = _NAME.match(name)
    if m is None:
        return None
    tokens = m["ops"].split("_")  # "_to_copy_add" -> ["", "to", "copy", "add"]
    ops: list[str] = []
    i = 0
    while i < len(tokens):
        for size in range(min(_LONGEST, len(tokens) - i), 1, -1):
            if tuple(tokens[i:i + size]) in _VOCAB:
                op = "_".join(tokens[i:i + size])
                i += size
                break
        else:  # one word; an unknown private operator keeps its underscore's next word
            if tokens[i] == "" and i + 1 < len(tokens):
                op, i = "_" + tokens[i + 1], i + 2
            else:
                op, i = tokens[i], i + 1
        op = op.lstrip("_")
        if op and op not in ops:
            ops.append(op)
    return tuple(ops) or None


def fused_label(name: str) -> str | None:
    """``fused: add, mul`` for an Inductor kernel name, else None."""
    ops = fused_ops(name)
    return f"fused: {', '.join(ops)}" if ops else None


SEPARATOR = " · "
_DISPLAYED = re.compile(r"^(triton_[a-z]+)_fused_.+?_(\d+) · (fused: .*)$")


def display(name: str) -> str:
    """A kernel name as people read it: an Inductor kernel with what it fused
    (``triton_poi_fused_add_mul_0 · fused: add, mul``), other names as they are."""
    if not name.startswith("triton_"):
        return name
    text = fused_label(name)
    return f"{name}{SEPARATOR}{text}" if text else name


def shortened(displayed: str, width: int) -> str | None:
    """A displayed Inductor name in at most ``width`` characters, its label kept longest: the
    operators of the name go first (``triton_red_…_1 · fused: to_copy, add``), then the
    ``triton_``/``fused:`` words (``red_1 · to_copy, add``), then the end of the list
    (``red_1 · to_copy, a…``). None for other names (and widths under 11)."""
    m = _DISPLAYED.match(displayed)
    if m is None:
        return None
    kind, n, text = m[1], m[2], m[3]
    head, ops = f"{kind}_…_{n}{SEPARATOR}", text
    if len(head) + len(ops) <= width:
        return head + ops
    head, ops = f"{kind.removeprefix('triton_')}_{n}{SEPARATOR}", text.removeprefix("fused: ")
    if len(head) + len(ops) <= width:
        return head + ops
    if len(head) + 4 <= width:  # a few characters of the list, then an ellipsis
        return head + ops[: width - len(head) - 1] + "…"
    return None
