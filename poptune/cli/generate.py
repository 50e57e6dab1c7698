"""``poptune generate``: a demo of one configuration: its greedy text and time to first token beside the full model's.

Without ``--prompt`` the prompt is :func:`poptune.measure.timing_prompts.demo_prompt` (about 1,000 Gemma-3 tokens), long
enough for prefill, which POP shortens, to dominate the time to first token. Each ``--follow-up`` is a later turn
of the conversation: its text is appended after the model's answer and prefilled on top of the conversation's
cache -- with POP, as a prompt -- and answered; each model carries on its own conversation.
"""

from __future__ import annotations

import argparse
from typing import Any

from poptune.cli._args import add_model, add_pop, add_prefill_chunk, count, pop_config, prefill_chunk, prepare_kv
from poptune.errors import ConfigError
from poptune.kv import registry as kv_registry

#: Below this many prompt tokens the output says why little or no speedup shows.
SHORT_PROMPT = 256

SHORT_NOTE = (
    "note: a short prompt shows little or no speedup: POP prunes layers only for the prompt tokens, and on a short "
    "prompt the boundary pass and the LM head dominate the time to first token"
)


def register(sub: Any) -> None:
    parser = sub.add_parser("generate", help="generate text with POP and compare time to first token")
    add_model(parser)
    add_pop(parser, skip_required=False)
    parser.add_argument("--config", help="an exported configuration (poptune export) instead of --skip ...")
    parser.add_argument("--force", action="store_true",
                        help="apply --config made for another model, machine or weights, or one that names no weights "
                             "fingerprint (meant for any weights)")
    parser.add_argument("--prompt", help="the prompt (default: a built-in passage of about 1,000 tokens and a "
                                         "question: the first chapter of Pride and Prejudice)")
    parser.add_argument("--max-new-tokens", type=count, default=32, help="greedy tokens for each model (default: 32)")
    parser.add_argument("--follow-up", action="append", default=[], metavar="TEXT",
                        help="a later turn, asked after the answer on top of the conversation's cache (repeatable), "
                             "e.g. --follow-up 'Who says it?'")
    add_prefill_chunk(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.prompt is not None and not args.prompt.strip():
        raise ConfigError("`--prompt` must not be empty")
    if args.max_new_tokens < 1:
        raise ConfigError(f"`--max-new-tokens` must be >= 1, got {args.max_new_tokens}")
    if any(not text.strip() for text in args.follow_up):
        raise ConfigError("`--follow-up` must not be empty")
    chunk = prefill_chunk(args)
    if args.config:
        if args.skip is not None:
            raise ConfigError("give --skip (and --boundary, --offset) or --config, not both")
        from poptune.reports.export import load_config

        config = load_config(args.config, model=args.model, device=args.device, force=args.force,
                             weights=args.weights)
    elif args.skip is None:
        raise ConfigError("give --skip (and --boundary, --offset) or --config")
    else:
        config = pop_config(args)  # validated before the model loads

    from poptune.engine import decoder_of
    from poptune.measure.prefill import time_prefill_pair
    from poptune.measure.timing_prompts import demo_prompt
    from poptune.models import load_model, load_tokenizer, max_positions

    at_hand = load_tokenizer(args.model, args.weights)  # the prompt against the context before the model loads
    prompt = prompt_within(args, at_hand, max_positions(args.model, args.weights)) if at_hand is not None else None
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    config.check(len(decoder_of(model).layers))
    if prompt is None:  # no tokenizer or context at hand without loading: checked now, before any generation
        prompt = prompt_within(args, tokenizer, getattr(decoder_of(model).config, "max_position_embeddings", None))
    if args.config and kv_registry.source(config.kv).export_key:  # what the export carries (calibrated: its maps)
        from poptune.models import weights_fingerprint
        from poptune.reports.export import load_carried

        load_carried(args.config, model, fingerprint=weights_fingerprint(args.model, args.weights), force=args.force)
    else:
        prepare_kv(model, tokenizer, config, args)
    inputs = tokenizer([prompt], return_tensors="pt").to(model.device)
    turns = [tokenizer(["\n\n" + text], add_special_tokens=False, return_tensors="pt")["input_ids"].to(model.device)
             for text in args.follow_up]
    pop_answers = converse(model, inputs, turns, config, args.max_new_tokens, chunk)
    full_answers = converse(model, inputs, turns, None, args.max_new_tokens, chunk)
    pair = time_prefill_pair(model, inputs, config, chunk)
    length = inputs["input_ids"].shape[1]
    source = "your prompt" if args.prompt else "built-in demo: Pride and Prejudice, chapter 1, and a question" + (
        "" if prompt == demo_prompt() else f", cut to fit the model's context with {args.max_new_tokens} new tokens")
    chunked = f", prefilled in chunks of {chunk} tokens" if chunk else ""
    print(f"prompt: {length} tokens ({source}{chunked})")
    _print_answers(tokenizer, config, pop_answers[0], full_answers[0], args.max_new_tokens)
    print(ttft_line(pair, length))
    if length < SHORT_PROMPT:
        print(SHORT_NOTE)
    for i, (text, turn) in enumerate(zip(args.follow_up, turns), start=1):
        print(f"follow-up {i}: {text!r} ({turn.shape[1]} tokens, prefilled on top of the conversation's cache)")
        _print_answers(tokenizer, config, pop_answers[i], full_answers[i], args.max_new_tokens)
    return 0


def prompt_within(args: argparse.Namespace, tokenizer: Any, limit: int | None) -> str:
    """The prompt to generate from, checked against the model's context of ``limit`` positions (None: unknown):
    the prompt, each follow-up and each turn's ``--max-new-tokens`` must fit, or a user's prompt is refused in one
    line; the built-in demo passage is cut to fit (its question kept).

    Raises:
        ConfigError: the conversation does not fit the context.
    """
    from poptune.measure.timing_prompts import demo_prompt

    def tokens(text: str, special: bool = True) -> int:
        return len(tokenizer(text, add_special_tokens=special)["input_ids"])

    room = args.max_new_tokens * (1 + len(args.follow_up)) + sum(tokens("\n\n" + t, False) for t in args.follow_up)
    text = args.prompt if args.prompt is not None else demo_prompt()
    if limit is None:
        return text
    need = tokens(text) + room
    if args.prompt is None:
        head, question = text.rsplit("\n\nQuestion:", 1)
        while need > limit and len(head) > 1:  # the passage shortened in proportion until it fits
            head = head[: int(len(head) * max(limit - room, 0) / (need - room) * 0.98)]
            text = f"{head}\n\nQuestion:{question}"
            need = tokens(text) + room
    if need > limit:
        what = "`--prompt`" if args.prompt is not None else "the built-in demo's question"
        extra = f" and {len(args.follow_up)} `--follow-up` turn(s)" if args.follow_up else ""
        raise ConfigError(f"{what} ({tokens(text)} tokens) with `--max-new-tokens {args.max_new_tokens}`{extra} "
                          f"needs {need} positions; the model {args.model} holds {limit}")
    return text


def _print_answers(tokenizer: Any, config: Any, pop_ids: list[int], full_ids: list[int], most: int) -> None:
    print(f"POP [{config}]: {tokenizer.decode(pop_ids, skip_special_tokens=True)!r}")
    print(f"full model: {tokenizer.decode(full_ids, skip_special_tokens=True)!r}")
    print(f"the two agree on their first {_agreeing(pop_ids, full_ids)} tokens (POP generated {len(pop_ids)}, "
          f"the full model {len(full_ids)}, at most {most} each)")


def converse(model: Any, inputs: Any, turns: list[Any], config: Any, max_new_tokens: int,
             chunk: int | None = None) -> list[list[int]]:
    """Greedy answers to the prompt and to each later turn (token ids (1, M) appended after the answer before).

    With ``config``, POP prefills the prompt (in chunks of ``chunk`` tokens if given) and each turn on top of the
    conversation's cache; decode is the full model. Without, the plain model.
    """
    import torch

    from poptune.engine import apply_pop, remove_pop
    from poptune.engine.segments import generate

    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True)
    if config is not None:
        apply_pop(model, config)
    try:
        with torch.inference_mode():
            out = generate(model, inputs, chunk=chunk, **kwargs)
            answers = [out.sequences[0, inputs["input_ids"].shape[1] :].tolist()]
            for turn in turns:
                ids = torch.cat([out.sequences, turn], dim=1)  # (1, conversation so far + turn)
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), cache=out.cache, **kwargs)
                answers.append(out.sequences[0, ids.shape[1] :].tolist())
    finally:
        if config is not None:
            remove_pop(model)
    return answers


def _agreeing(a: list[int], b: list[int]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def ttft_line(pair: Any, length: int) -> str:
    """Time to first token of both models, and the speedup with the interleaved pairs behind it.

    ``pair`` is a :class:`~poptune.measure.timer.PairRecord` (a = POP, b = full model). The range of the per-pair
    ratios is given beside their median: with n >= 6 pairs it covers the true median ratio with probability at
    least 1 - 2 ** (1 - n) (97% for 6), whatever the distribution.
    """
    ratios = pair.ratios
    return (
        f"time to first token ({length} prompt tokens, medians of {pair.a.count} interleaved pairs): "
        f"POP {pair.a.p50:.1f} ms, full model {pair.b.p50:.1f} ms; speedup {pair.speedup:.2f}x "
        f"(median of the {len(ratios)} per-pair ratios, range {min(ratios):.2f}-{max(ratios):.2f})"
    )
