"""Optional: a local Hugging Face causal LM for ``nsys-mine infer --model hf:/path``.

Only when ``transformers`` is installed; the model must be a local folder (``config.json`` and
the weights, as ``save_pretrained`` writes them): nothing is ever downloaded
(``local_files_only=True``). ``HFDecoder`` gives the model the two methods ``generate`` calls
(``new_kv_cache`` and ``forward_cached``), with transformers' own KV cache
(``past_key_values``), so the timing, metrics and NVTX ranges are those of the own model.
``--attention naive`` loads it with ``attn_implementation="eager"``, ``sdpa`` with ``"sdpa"``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption
from nvtx_model.config import Shape

INSTALL_HINT = ("pip install transformers (the model itself must be a local folder: nothing "
                "is downloaded)")


def require_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise BadOption(f"--model hf:PATH needs the transformers package; {INSTALL_HINT}")


def hf_shape(path: str) -> tuple[Shape, int, int | None]:
    """(shape, vocabulary size, maximum positions) from the folder's ``config.json``, for the
    rows and the memory estimate (Llama/GPT-2 style names)."""
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file():
        raise BadOption(f"--model hf:{path}: no config.json in that folder; give the folder "
                        "save_pretrained wrote (a local Hugging Face causal LM)")
    try:
        c = json.loads(config.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BadOption(f"--model hf:{path}: config.json is not valid JSON: {exc}") from None

    def first(*keys: str) -> Any:
        return next((c[k] for k in keys if c.get(k) is not None), None)

    d = first("hidden_size", "n_embd", "d_model")
    layers = first("num_hidden_layers", "n_layer", "num_layers")
    heads = first("num_attention_heads", "n_head", "num_heads")
    vocab = first("vocab_size")
    if not all(isinstance(v, int) for v in (d, layers, heads, vocab)):
        raise BadOption(f"--model hf:{path}: config.json lacks hidden size, layers, heads or "
                        "vocab_size; is it a causal LM?")
    d_ff = first("intermediate_size", "n_inner", "ffn_dim") or 4 * d
    return (Shape(d_model=d, d_ff=d_ff, num_layers=layers, num_heads=heads), vocab,
            first("max_position_embeddings", "n_positions"))


class HFCache:
    """transformers' ``past_key_values`` and how many positions it holds."""

    def __init__(self) -> None:
        self.past: Any = None
        self.length = 0


class HFDecoder:
    """A transformers causal LM behind ``generate``'s two methods."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def new_kv_cache(self, batch: int, max_length: int) -> HFCache:
        return HFCache()

    def forward_cached(self, token_ids: Any, cache: HFCache, *, last_only: bool = False) -> Any:
        out = self.model(input_ids=token_ids, past_key_values=cache.past, use_cache=True)
        cache.past = out.past_key_values
        cache.length += token_ids.shape[-1]
        return out.logits[:, -1:] if last_only else out.logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def load_hf_model(path: str, device: Any, precision: str, attention: str) -> HFDecoder:
    """The local model at ``path`` on ``device``, weights in ``precision``, in eval mode."""
    require_transformers()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bars between the table rows

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True,
            attn_implementation="eager" if attention == "naive" else "sdpa")
    except (OSError, ValueError) as exc:
        raise BadOption(f"--model hf:{path} could not be loaded as a local causal LM: "
                        f"{str(exc).splitlines()[0]}") from None
    return HFDecoder(model.to(device=device, dtype=dtype).eval())
