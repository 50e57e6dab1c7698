"""Fitting calibrated K/V maps for POP's skipped block, closed form, and keeping them on disk.

For a block ``[s, e)`` and each layer ``l`` in ``(s, e)``, POP writes the pruned tokens' K/V from the block-entry
state ``h_s`` where the full model has ``h_l``. On calibration text (:class:`KVFitSpec`: WikiText-2 *validation*
windows of two lengths, 16 of 512 tokens and 48 of 64, each after BOS, so that short prompts, the sink and the
first positions weigh in the fit as they do in real prompts; a study's own never-scored prompts; text sampled
from the model without a data directory; :mod:`poptune.kvfit.calibration`), with ``X = LN_l(h_s)`` and
``Y = W LN_l(h_l)`` (the layer's own projection of its true input, bias excluded, before the key norm and
RoPE), each of ``W_K`` and ``W_V`` is replaced by the ridge solution pulled towards the layer's own weights:

    W_fit = argmin ||X M^T - Y||^2 + lam ||M - W||^2 = ((X^T X + lam I)^-1 (X^T Y + lam W^T))^T,

in float64, with ``lam = ridge * trace(X^T X) / C``. With little text the fit stays near the layer's own
projection; when ``Y`` is an exact linear function of ``X`` the fit recovers it. The residual stream of the
calibration text is computed once (:class:`KVFitter`) and serves every block.

**Validation.** Every ``holdout``-th window (or prompt) is left out of the fit; held-out WikiText-2 windows are
drawn from the last ``1/holdout`` of the text, which no fit window touches (:meth:`KVFitSpec.calibrations`).
The held-out windows are scored with the maps and with the layers' own K/V at several continuation points each,
and the block keeps its maps only where a one-sided paired t-test at level ``alpha`` finds them better
(:mod:`poptune.kvfit.check`, which states the test and its error rate); otherwise it keeps its layers' own
projections altogether (calibrated K/V then are the paper's POP, exactly). Nothing else is chosen on the
held-out windows, so the test's level holds for the maps it decides on.

**Sink tokens** (Gemma-3's BOS: a block-entry norm 6-16x every other token's) can get maps of their own, found
by that norm (``KVFitSpec.sink``, :mod:`poptune.kv.maps`); measured worse than one map for every token, so off
by default.

Maps are kept under ``<cache>/kv-maps/<weights fingerprint>/`` (:mod:`poptune.cache`: ``$POPTUNE_CACHE``, else
the user cache folder, ``~/.cache/poptune`` on Linux; ``$POPTUNE_KV_MAPS`` names the folder itself), one
safetensors file per block and calibration (:meth:`KVFitter.cache_tag`), and reused: the calibrated source
prepares a model so (:mod:`poptune.kv.calibrated`, through :func:`poptune.kvfit.prepare.prepare_kv`). Where that
folder cannot be written, they are kept in the cache's fallback folder (one warning line), and where none can,
used without being kept (one warning line); never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from poptune.boundary import registry as boundary_registry
from poptune.engine import PopConfig, decoder_of
from poptune.errors import ConfigError, DataError
from poptune.files import typed_path
from poptune.kv import calibrated as calibrated_source
from poptune.kv.maps import KVMaps
from poptune.kv.registry import DEFAULT
from poptune.kvfit.calibration import (
    GENERATED,
    Calibration,
    CalibrationSpec,
    calibration,
    calibration_file,
    residual_stream,
)
from poptune.kvfit.check import ALPHA, keep_maps, window_differences

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["FIT_VERSION", "KVFitSpec", "KVFitter", "PROMPT_TOKENS"]


#: Bumped whenever the fit changes what it produces: maps cached by an older fit are not reused.
FIT_VERSION = 4  # 2: sink tokens, short and long windows, held-out validation; 3: its decision is a stated test;
# 4: held-out windows drawn from a region of the text apart from the fit windows'

#: Tokens of one calibration prompt at most (a longer prompt is cut), and of all of them (the prompt that crosses
#: the budget is the last; on the long-prompt pack, 31 prompts of about 1,100 tokens, so the check has 7 held out).
PROMPT_TOKENS = 2048
PROMPT_BUDGET = 32768

#: Sink handling: a map fitted on sink tokens alone, the layer's own projections for them, or none (every
#: token through the one fitted map: the fit before issue 38).
SINK_MODES: tuple[str, ...] = ("fitted", "own", "none")


@dataclass(frozen=True)
class KVFitSpec:
    """How calibrated K/V maps are fitted.

    Attributes:
        samples: Long calibration windows.
        length: Tokens per long window (BOS included).
        short_samples: Short windows (prompts of a few dozen tokens: the sink and the first positions weigh
            in the fit as they do in short prompts); 0: none.
        short_length: Tokens per short window (BOS included).
        seed: Seed of the window offsets (or of the sampled text).
        ridge: Pull towards the layer's own projection, relative to the mean diagonal of ``X^T X``.
        data_dir: Data directory (its ``wikitext-2/valid.txt``); None: ``$POPTUNE_DATA``, else sampled text.
        sink: How sink tokens (block-entry norm far above every other token's) are treated; see
            :data:`SINK_MODES`. ``none`` (one map for every token, the sink weighed in by the short windows) is
            the default because it measured best on held-out WikiText-2 test windows with BOS (Gemma-3-270M,
            16-token continuations after 64- and 512-token contexts, calibrated minus own NLL at skip 6:
            none -0.048 / -0.100, own -0.022 / -0.078, fitted -0.003 / -0.087; at skip 9: -0.79 / -1.93,
            -0.73 / -1.89, -0.77 / -1.94; 40 and 10 windows, 2026-12-02).
        holdout: Every ``holdout``-th window (or prompt) is held out of the fit to validate it (0: none; the
            maps are then kept unchecked); held-out windows come from the last ``1/holdout`` of the text, fit
            windows from the rest (:meth:`calibrations`).
        continuation: Tokens scored at each continuation point of a held-out window, at full depth after the
            POP prefill of what precedes them (:mod:`poptune.kvfit.check`).
        points: Continuation points per held-out window, spread evenly over it (:func:`poptune.kvfit.check.cut_ends`).
        alpha: Level of the check's one-sided test: the most often maps that are not better are kept.
        prompts: Prompts to fit on instead of WikiText-2 (a study's calibration split of its own workload,
            :func:`poptune.evaluate.workload.calibration_prompts`): each after BOS, cut at
            :data:`PROMPT_TOKENS` tokens, until :data:`PROMPT_BUDGET` tokens in all.
        prompts_source: Which prompts those are, in words (stored with the maps).
    """

    samples: int = 16
    length: int = 512
    short_samples: int = 48
    short_length: int = 64
    seed: int = 0
    ridge: float = 1e-3
    data_dir: str | None = None
    sink: str = "none"
    holdout: int = 4
    continuation: int = 16
    points: int = 4
    alpha: float = ALPHA
    prompts: tuple[str, ...] = ()
    prompts_source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.ridge, bool) or not isinstance(self.ridge, (int, float)) or not self.ridge >= 0:
            raise ConfigError(f"`ridge` must be a number >= 0, got {self.ridge!r}")
        if self.sink not in SINK_MODES:
            raise ConfigError(f"`sink` must be one of {', '.join(SINK_MODES)}, got {self.sink!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise ConfigError(f"`alpha` must be a number in (0, 1), got {self.alpha!r}")
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 1:
            raise ConfigError(f"`points` must be an integer >= 1, got {self.points!r}")
        for name in ("short_samples", "holdout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value == 1 and name == "holdout":
                raise ConfigError(f"`{name}` must be 0 or an integer >= {2 if name == 'holdout' else 1}, got {value!r}")
        if not isinstance(self.continuation, int) or not 1 <= self.continuation < min(self.lengths()):
            raise ConfigError(f"`continuation` must be in [1, {min(self.lengths()) - 1}], got {self.continuation!r}")
        for spec in self.calibrations():  # checks the amounts
            del spec

    def lengths(self) -> tuple[int, ...]:
        return (self.length, self.short_length) if self.short_samples else (self.length,)

    def source(self) -> str:
        """Which text the maps are fitted on, in words."""
        if self.prompts:
            return self.prompts_source or f"{len(self.prompts)} given prompts"
        path = calibration_file(self.data_dir, "valid")
        return GENERATED if path is None else f"WikiText-2 validation ({typed_path(str(path))})"

    def calibrations(self) -> list[tuple[CalibrationSpec, bool]]:
        """The calibration texts, each with whether it is held out: per length, fit windows then held-out ones.

        Every ``holdout``-th window overall (long ones first) is held out: 4 of 16 long and 12 of 48 short by
        default. Windows drawn at random offsets overlap one another, so a held-out window drawn like the others
        could share tokens with a fit window, and the check would score text the fit saw. Instead the fit windows
        lie in the first ``1 - 1/holdout`` of the text's tokens and the held-out ones in the rest
        (:attr:`CalibrationSpec.region`), disjoint by construction. One cut, rather than held-out windows placed
        in the gaps fit windows leave: it is correct for any amount of text and any draw, and the held-out
        text is other articles, as the text the maps later meet is. Sampled text (no data directory) has no
        region: each sequence is its own draw, the held-out ones under seeds after the fit's.
        """
        cut = 1 - 1 / self.holdout if self.holdout else 1.0
        amounts = [(self.samples, self.length)] + ([(self.short_samples, self.short_length)] if self.short_samples
                                                   else [])
        specs, first = [], 0
        for i, (count, length) in enumerate(amounts):
            held = (first + count) // self.holdout - first // self.holdout if self.holdout else 0
            first += count
            for n, region, seed, out in ((count - held, (0.0, cut), self.seed + i, False),
                                         (held, (cut, 1.0), self.seed + len(amounts) + i, True)):
                if n:
                    specs.append((CalibrationSpec(samples=n, length=length, seed=seed, data_dir=self.data_dir,
                                                  batch_size=16, split="valid", region=region), out))
        return specs


class KVFitter:
    """Fits the maps of any block of one model on one calibration text (its residual stream computed once)."""

    def __init__(self, model: "nn.Module", tokenizer: Any, spec: KVFitSpec, fingerprint: str) -> None:
        self.model, self.tokenizer, self.spec, self.fingerprint = model, tokenizer, spec, fingerprint
        self._texts: list[tuple[Calibration, "torch.Tensor"]] | None = None  # per text: text, (L + 1, S, T, C)
        self._held: list[bool] = []  # per text: held out of the fit

    def texts(self) -> list[tuple[Calibration, bool]]:
        """The calibration texts (made once) and, for each, whether it is held out of the fit to check it."""
        if self._texts is None:
            if self.spec.prompts:
                texts = self._prompt_texts()
                h = self.spec.holdout
                self._held = [bool(h) and i % h == h - 1 for i in range(len(texts))]
            else:
                chosen = self.spec.calibrations()
                texts = [calibration(self.model, self.tokenizer, spec) for spec, _ in chosen]
                self._held = [out for _, out in chosen]
            self._texts = [(calib, residual_stream(self.model, calib)) for calib in texts]
        return [(calib, out) for (calib, _), out in zip(self._texts, self._held)]

    def _residual(self) -> list[tuple[Calibration, "torch.Tensor"]]:
        self.texts()
        assert self._texts is not None
        return self._texts

    def _prompt_texts(self) -> list[Calibration]:
        """One calibration text per prompt (BOS first, cut at :data:`PROMPT_TOKENS`) up to :data:`PROMPT_BUDGET`."""
        import torch

        device = next(self.model.parameters()).device
        texts, total = [], 0
        for prompt in self.spec.prompts:
            ids = self.tokenizer(prompt)["input_ids"][:PROMPT_TOKENS]
            if len(ids) < 2 or total >= PROMPT_BUDGET:
                continue
            total += len(ids)
            spec = CalibrationSpec(samples=1, length=len(ids), seed=self.spec.seed, batch_size=1)
            texts.append(Calibration(torch.tensor([ids], device=device), self.spec.source(), spec))
        if not texts:
            raise DataError("no calibration prompt has two tokens or more")
        return texts

    def cache_tag(self) -> str:
        """How the maps are fitted, as 12 hex digits: their file's name in the maps folder ends with it
        (:func:`poptune.kv.maps.maps_file`), so that maps fitted otherwise are never reused."""
        spec = self.spec
        source = calibration_file(spec.data_dir, "valid") if not spec.prompts else None
        described = {**asdict(spec), "data_dir": None, "fit_version": FIT_VERSION,
                     "source": "prompts" if spec.prompts else "generated" if source is None else source.name}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> dict[str, Any]:
        """The calibration text used so far (amount, seed, source, per window length); empty before a fit."""
        if self._texts is None:
            return {}
        if self.spec.prompts:
            return {"source": self.spec.source(), "prompts": len(self._texts), "holdout": self.spec.holdout,
                    "tokens": sum(int(calib.ids.numel()) for calib, _ in self._texts)}
        texts = self.texts()
        described = [{**calib.describe(), "held_out": out} for calib, out in texts]
        return {**texts[0][0].describe(), "windows": described, "holdout": self.spec.holdout}

    def _split(self, layer: int) -> tuple["torch.Tensor", "torch.Tensor"]:
        """The residual stream at ``layer`` of the fit windows and of the held-out ones, flattened: (M, C) each."""
        import torch

        parts: dict[bool, list[torch.Tensor]] = {False: [], True: []}
        for (_, stream), out in zip(self._residual(), self._held):
            parts[out].append(stream[layer].flatten(0, 1))
        empty = self._residual()[0][1][layer][:0].flatten(0, 1)  # (0, C)
        return torch.cat(parts[False] or [empty]), torch.cat(parts[True] or [empty])

    def sink_norm(self, start: int) -> float | None:
        """The block-entry norm above which a token is a sink: half the smallest first-position (BOS) norm, where
        that norm is at least 4x the median of the later positions' (a massive activation; measured on Gemma-3:
        5.6-16x at layers 6-14); else (no sink at this depth, or sinks not treated apart) None. A later token
        with a norm that high (a second sink) is one too."""
        import torch

        if self.spec.sink == "none":
            return None
        first = min(float(stream[start][:, 0].norm(dim=-1).min()) for _, stream in self._residual())
        rest = float(torch.cat([stream[start][:, 1:].norm(dim=-1).flatten()
                                for _, stream in self._residual()]).median())
        return first / 2 if first >= 4 * rest else None

    def fit(self, start: int, stop: int) -> KVMaps:
        """The maps of block ``[start, stop)`` (layers ``start + 1 .. stop - 1``), checked on held-out windows."""
        import torch

        began = time.perf_counter()
        decoder = decoder_of(self.model)
        if not 0 <= start < stop <= len(decoder.layers):
            raise ConfigError(f"block [{start}, {stop}) does not fit a model of {len(decoder.layers)} layers")
        texts = self._residual()
        threshold = self.sink_norm(start)
        entry, entry_held = self._split(start)
        weights, sinks, errors = {}, {}, {}
        with torch.inference_mode():
            for index in range(start + 1, stop):
                true, true_held = self._split(index)
                fitted = _LayerFit(decoder.layers[index], self.spec.ridge, threshold)
                weights[index], sink, errors[str(index)] = fitted.fit((entry, true), (entry_held, true_held),
                                                                     self.spec.sink == "fitted")
                if sink is not None:
                    sinks[index] = sink
        maps = KVMaps(start, stop, weights, self.fingerprint, {}, None, sinks, threshold)
        validation = self._validate(maps) if self.spec.holdout and weights else None
        kept = validation is None or validation["keep"]
        if not kept:
            maps = _own_maps(decoder, start, stop, self.fingerprint)  # not shown better: the paper's K/V
        maps.meta = {"calibration": self.describe(), "tokens": int(entry.shape[0]), "ridge": self.spec.ridge,
                     "fit_version": FIT_VERSION, "sink": self.spec.sink, "sink_norm": threshold,
                     "sink_tokens": int(sum(float(s[start].norm(dim=-1).gt(threshold).sum()) for _, s in texts))
                     if threshold else 0, "relative_error": errors, "kept_own": [] if kept else "all (block)",
                     "validation": validation, "seconds": round(time.perf_counter() - began, 3)}
        return maps

    def _validate(self, maps: KVMaps) -> dict[str, Any] | None:
        """The block-level check (:mod:`poptune.kvfit.check`) on the held-out windows: their NLL with the layers'
        own K/V and with ``maps``, and whether the maps are kept; None where no window is held out."""
        layers = len(decoder_of(self.model).layers)
        held = [calib.ids for calib, out in self.texts() if out and calib.ids.shape[1] > self.spec.continuation + 1]
        if not held:
            return None
        own = PopConfig(maps.stop - maps.start, boundary_registry.DEFAULT, offset=layers - maps.stop, kv=DEFAULT)
        calibrated = PopConfig(own.skip, own.boundary, offset=own.offset, kv=calibrated_source.SOURCE.name)
        decoder, holder = decoder_of(self.model), calibrated_source.SOURCE
        previous = holder.held(decoder).get(maps.block)
        holder.attach(decoder, maps)
        try:
            nll_own, nll_fit = window_differences(self.model, own, calibrated, held, self.spec.continuation,
                                                  self.spec.points)
        finally:
            holder.detach(decoder, maps.block)
            if previous is not None:
                holder.attach(decoder, previous)
        check = keep_maps([c - o for c, o in zip(nll_fit, nll_own)], self.spec.alpha)
        return {**check, "continuation": self.spec.continuation, "points": self.spec.points,
                "own_nll": sum(nll_own) / len(nll_own), "calibrated_nll": sum(nll_fit) / len(nll_fit)}


def _own_maps(decoder: Any, start: int, stop: int, fingerprint: str) -> KVMaps:
    """Maps that are the layers' own projections (calibrated K/V then equals the paper's POP exactly)."""
    weights = {i: (decoder.layers[i].self_attn.k_proj.weight.detach().clone(),
                   decoder.layers[i].self_attn.v_proj.weight.detach().clone()) for i in range(start + 1, stop)}
    return KVMaps(start, stop, weights, fingerprint)


class _LayerFit:
    """The ridge fit of one layer's K and V maps (and its sink maps), with its errors on held-out tokens."""

    def __init__(self, layer: Any, ridge: float, sink_norm: float | None) -> None:
        self.layer, self.ridge, self.sink_norm = layer, ridge, sink_norm

    def _inputs(self, entry: "torch.Tensor", true: "torch.Tensor"
                ) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
        """``(X, X_true, sink)``: what POP projects, what the full model projects (float64), which rows are sinks."""
        import torch

        norm, dtype = self.layer.input_layernorm, self.layer.self_attn.k_proj.weight.dtype
        sink = entry.norm(dim=-1) > self.sink_norm if self.sink_norm else torch.zeros(len(entry), dtype=torch.bool)
        return norm(entry.to(dtype)).double(), norm(true.to(dtype)).double(), sink

    def _solve(self, x: "torch.Tensor", target: "torch.Tensor", own: "torch.Tensor") -> "torch.Tensor":
        import torch

        gram = x.T @ x  # (C, C)
        lam = self.ridge * float(torch.diagonal(gram).mean())
        regularised = gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype)
        return torch.linalg.solve(regularised, x.T @ target + lam * own.T).T  # (O, C)

    def fit(self, fit: tuple["torch.Tensor", "torch.Tensor"], held: tuple["torch.Tensor", "torch.Tensor"],
            fit_sinks: bool) -> tuple[tuple["torch.Tensor", "torch.Tensor"], "tuple | None", dict]:
        """``((W_K, W_V), sink maps or None, relative errors)``.

        Errors: ``[own, fitted]`` relative Frobenius errors on the fit tokens, ``held_*`` on the held-out ones
        (reported only: the block-level check alone decides, so that its level holds).
        """
        x, x_true, sink = self._inputs(*fit)
        hx, hx_true, hsink = self._inputs(*held)
        attn, dtype = self.layer.self_attn, self.layer.self_attn.k_proj.weight.dtype
        chosen, sinks, errors = [], [], {}
        for name, proj in (("k", attn.k_proj), ("v", attn.v_proj)):
            own = proj.weight.double()  # (O, C)
            solution = self._solve(x[~sink], x_true[~sink] @ own.T, own)
            errors[name] = _errors(x[~sink], x_true[~sink], own, solution)
            errors[f"held_{name}"] = _errors(hx[~hsink], hx_true[~hsink], own, solution)
            chosen.append(solution.to(dtype))
            if fit_sinks and bool(sink.any()):
                fitted = self._solve(x[sink], x_true[sink] @ own.T, own)
                errors[f"sink_{name}"] = _errors(x[sink], x_true[sink], own, fitted)
                if bool(hsink.any()):
                    errors[f"held_sink_{name}"] = _errors(hx[hsink], hx_true[hsink], own, fitted)
                sinks.append(fitted.to(dtype))
        return (chosen[0], chosen[1]), (sinks[0], sinks[1]) if sinks else None, errors


def _errors(x: "torch.Tensor", x_true: "torch.Tensor", own: "torch.Tensor", fitted: "torch.Tensor") -> list[float]:
    """Relative Frobenius error of the own and of the fitted projection of ``x`` against the true K or V."""
    target = x_true @ own.T
    scale = float(target.norm()) or 1.0
    return [float((x @ own.T - target).norm()) / scale, float((x @ fitted.T - target).norm()) / scale]
