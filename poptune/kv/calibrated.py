"""Calibrated K/V: the pruned tokens' K/V through projections fitted to the full model's (issue 38).

Each skipped layer after the block's first writes the pruned tokens' K/V through the maps of its block
(:class:`poptune.kv.maps.KVMaps`: fitted in closed form on calibration text and checked on held-out windows,
:mod:`poptune.kvfit.fit`), attached to the model; a configuration without its block's maps attached is refused.
One skipped layer has no map (the block-entry state is its true input), so calibrated K/V differ from the
layers' own from two skipped layers on. Preparing a model loads the block's maps from the maps folder, else fits
them there (once per weights, block and calibration); an exported configuration carries its maps file. The
source holds the maps a decoder carries (:meth:`CalibratedKV.attach`, :meth:`~CalibratedKV.detach`,
:meth:`~CalibratedKV.held`; users call :func:`poptune.attach_kv_maps` with the model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poptune import progress
from poptune.errors import ConfigError
from poptune.kv import project
from poptune.kv.maps import KVMaps, keep, maps_file, maps_paths, read_cached
from poptune.kv.source import Decoder, KVSource, Preparation, Segment, SkipPlan, Write, block_of

if TYPE_CHECKING:
    from torch import nn

__all__ = ["SOURCE", "CalibratedKV"]

#: Where a decoder holds its maps, by block.
_ATTR = "_poptune_kv_maps"


class CalibratedKV(KVSource):
    name = "calibrated"
    label = "calibrated K/V"
    tag = "kvcal"
    help = ("projections fitted per block to the full model's K/V on calibration text (a study's own prompts that it "
            "never scores, else WikiText-2 validation text of the data directory, else text sampled from the model), "
            "kept in the poptune cache, and only where a one-sided test on held-out text finds them better")
    min_skip = 2
    export_key = "kv_maps"
    export_suffix = ".kv.safetensors"

    def check(self, config: SkipPlan) -> None:
        if config.skip == 0 or config.layers is not None:
            raise ConfigError(f"`kv='{self.name}'` needs skip >= 1 and a final block (no `layers`)")

    def ready(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], layout: str) -> None:
        self._maps(decoder, config, skipped)

    def writer(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int], segment: Segment) -> Write:
        maps = self._maps(decoder, config, skipped)

        def write(layer: Any, hidden_states: Any, position_embeddings: Any, cache: Any) -> None:
            fitted = maps.layer(layer.self_attn.layer_idx)
            project.write_prompt_kv(layer, hidden_states, position_embeddings, cache, fitted)

        return write

    def attach(self, decoder: Decoder, maps: KVMaps) -> None:
        """Give ``decoder`` the maps of one block (replacing any it held for that block), on its device and dtype.

        A decoder holds maps for any number of blocks (one per ``(skip, offset)``).

        Raises:
            ConfigError: maps that do not fit the decoder's layers (another architecture or size).
        """
        maps.check_fits(decoder)
        reference = decoder.layers[maps.start].self_attn.k_proj.weight
        moved = {layer: (k.to(reference.device, reference.dtype), v.to(reference.device, reference.dtype))
                 for layer, (k, v) in maps.weights.items()}
        held: dict[tuple[int, int], KVMaps] = dict(self.held(decoder))
        sinks = {layer: (k.to(reference.device, reference.dtype), v.to(reference.device, reference.dtype))
                 for layer, (k, v) in maps.sinks.items()}
        held[maps.block] = KVMaps(maps.start, maps.stop, moved, maps.fingerprint, dict(maps.meta), maps.path, sinks,
                                  maps.sink_norm)
        setattr(decoder, _ATTR, held)

    def detach(self, decoder: Decoder, block: tuple[int, int] | None = None) -> None:
        """Drop every map ``decoder`` holds (only those of ``block`` when given)."""
        if block is not None:
            setattr(decoder, _ATTR, {b: m for b, m in self.held(decoder).items() if b != block})
        elif hasattr(decoder, _ATTR):
            delattr(decoder, _ATTR)

    @staticmethod
    def held(decoder: Decoder) -> Mapping[tuple[int, int], KVMaps]:
        """The maps ``decoder`` holds, by block."""
        return getattr(decoder, _ATTR, {})

    def _maps(self, decoder: Decoder, config: SkipPlan, skipped: Sequence[int]) -> KVMaps:
        """The maps of ``config``'s block, or :class:`ConfigError` if the decoder holds none."""
        block = (min(skipped), max(skipped) + 1)
        maps = self.held(decoder).get(block)
        if maps is None:
            raise ConfigError(
                f"{config} needs fitted K/V maps of layers [{block[0]}, {block[1]}): fit or load them with "
                "poptune.prepare_kv (or KVMaps.load) and attach them with poptune.attach_kv_maps"
            )
        return maps

    def prepare(self, model: "nn.Module", tokenizer: Any, config: SkipPlan, preparation: Preparation) -> KVMaps:
        """Attach the maps of ``config``'s block: held already, read from the maps folder, else fitted (and kept
        there, :func:`poptune.kv.maps.keep`). Returns them.

        Raises:
            ConfigError: a model whose weights have no fingerprint (the maps are of one model's weights).
        """
        fingerprint, decoder = preparation.fingerprint, preparation.decoder
        if fingerprint is None:
            raise ConfigError("calibrated K/V needs the model's weights fingerprint (a model loaded by name)")
        block = block_of(config, len(decoder.layers))
        fitter = preparation.fitter()
        relative = maps_file(fingerprint, block, fitter.cache_tag())
        paths = maps_paths(relative, preparation.cache_dir)
        held = self.held(decoder).get(block)
        if held is not None and held.fingerprint == fingerprint and (
                held.path in paths or held.path is None and held.meta.get("cache_file") == relative.as_posix()):
            return held  # attached already (a trial's timing and its scoring need the same maps)
        with progress.phase(f"K/V calibration ({fitter.spec.source()})"):
            maps = read_cached(paths, fingerprint)
            if maps is None:
                maps = fitter.fit(*block)
                keep(maps, relative, preparation.cache_dir)
        self.attach(decoder, maps)
        return maps

    def details(self, prepared: object | None) -> dict[str, Any]:
        return {self.export_key: prepared.describe()} if isinstance(prepared, KVMaps) else {}

    def report_lines(self, details: Sequence[Mapping[str, Any]]) -> list[str]:
        """Which text the study's maps were fitted on, and per block what the fit's held-out check decided."""
        sources: dict[str, None] = {}
        checks: dict[tuple[int, ...], str] = {}
        for detail in details:
            maps = detail.get(self.export_key) or {}
            calibration = maps.get("calibration", {})
            if calibration.get("source"):
                used = (f" (the fit took {calibration['prompts']} of them, {calibration['tokens']:,} tokens)"
                        if "prompts" in calibration and "tokens" in calibration else "")
                sources[calibration["source"] + used] = None
            check = maps.get("validation") or {}
            if "p" in check:  # fit version 3 on: the check is a stated test
                kept = "maps kept" if check["keep"] else f"layers' own kept ({self.label} = own K/V)"
                checks[tuple(maps["block"])] = (
                    f"[{maps['block'][0]}, {maps['block'][1]}): {kept}, calibrated - own "
                    f"{check['calibrated_minus_own']:+.3f} nats on {check['windows']} held-out windows, "
                    f"p = {check['p']:.2g} (alpha {check['alpha']:g})")
        lines = [f"- {self.label} maps fitted on: {'; '.join(sources)}"] if sources else []
        if checks:
            lines.append("- the maps' held-out check (one-sided t-test, poptune/kvfit/check.py): "
                         + "; ".join(checks[block] for block in sorted(checks)))
        return lines

    def load_export(self, model: "nn.Module", decoder: Decoder, carried: dict[str, Any], folder: Path, *,
                    fingerprint: str | None) -> None:
        maps = KVMaps.load(folder / carried["file"], fingerprint=fingerprint, sha256=carried["sha256"])
        self.attach(decoder, maps)


SOURCE = CalibratedKV()
