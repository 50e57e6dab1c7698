"""``poptune eval``: accuracy of one configuration beside the full model, and its fidelity."""

from __future__ import annotations

import argparse
import json
from typing import Any

from poptune.cli._args import (
    LibraryDefault,
    add_model,
    add_option,
    add_output,
    add_pop,
    add_prefill_chunk,
    add_prompts,
    check_output_path,
    comma_list,
    count,
    emit,
    items,
    pop_config,
    prefill_chunk,
    prepare_kv,
    write_text,
)
from poptune.cli._runtime import add_runtime, vllm_model_dir


def register(sub: Any) -> None:
    parser = sub.add_parser("eval", help="accuracy under POP vs the full model (lm-eval tasks, synthetic, fidelity)")
    add_model(parser)
    add_pop(parser)
    from poptune.evaluate.tasks.registry import help_text

    parser.add_argument(
        "--tasks", type=comma_list,
        help=f"comma-separated: the task pack's {help_text()}; the synthetic passkey,kv_recall (group: embedded) "
        "(default: the six short real tasks with a data directory, else embedded)",
    )
    parser.add_argument("--limit", type=count, help="items per task, evenly spaced over the set (same items every run)")
    add_option(parser, "--data-dir")
    add_prompts(parser, store=False, judge=True)
    spec = "poptune.evaluate.suite:EvalSpec."  # the library's defaults
    parser.add_argument("--batch-size", type=count, default=LibraryDefault(spec + "batch_size"),
                        help="contexts prefilled together (default: %(default)s)")
    add_prefill_chunk(parser)
    parser.add_argument("--fidelity-pairs", type=count, default=LibraryDefault(spec + "fidelity.pairs"),
                        help="text pairs for fidelity, 0 to skip (default: %(default)s)")
    add_runtime(parser, "the embedded generation tasks")
    add_output(parser, "the result")
    parser.set_defaults(run=run)


def _tasks(args: argparse.Namespace, directory: Any) -> Any:
    """The tasks asked for (a prompts file's judge, or ``--tasks`` resolved), their data checked."""
    from poptune.evaluate.prompts import JUDGES
    from poptune.evaluate.suite import EMBEDDED, resolve_tasks
    from poptune.evaluate.taskpack import check_data

    given = ",".join(items(args.tasks)) if args.tasks is not None else None
    tasks = (JUDGES[args.judge or "answers"],) if args.prompts else resolve_tasks(given, directory)
    if directory is not None and not args.prompts:
        check_data(directory, [t for t in tasks if t not in EMBEDDED])
    if args.judge == "likelihood" and not args.prompts:  # the tasks' items judged by the full answer's likelihood
        from poptune.evaluate.judges import judged_tasks

        tasks = judged_tasks(tasks, defaults=args.tasks is None)
    return tasks


def run(args: argparse.Namespace) -> int:
    from poptune.evaluate.fidelity import FidelitySpec
    from poptune.evaluate.suite import EvalSpec, run_eval
    from poptune.evaluate.taskpack import data_dir

    config = pop_config(args)
    directory = data_dir(args.data_dir)
    tasks = _tasks(args, directory)
    fidelity = args.fidelity_pairs and not args.prompts and args.runtime == "hf"  # vLLM serves no prompt logprobs
    spec = EvalSpec(
        tasks=tasks,
        data_dir=directory,
        limit=args.limit,
        batch_size=args.batch_size,
        fidelity=FidelitySpec(pairs=args.fidelity_pairs) if fidelity else None,
        prefill_chunk=prefill_chunk(args),
        prompts=args.prompts,
    )
    if args.out:
        check_output_path(args.out)

    if args.runtime == "vllm":
        return _through_vllm(args, config, spec)

    from tqdm import tqdm

    from poptune.engine import decoder_of
    from poptune.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights)
    config.check(len(decoder_of(model).layers))
    prepare_kv(model, tokenizer, config, args, directory)
    steps = 2 + int(spec.fidelity is not None)
    with tqdm(total=steps, desc="eval", unit="step") as bar:

        def progress(done: str) -> None:
            bar.update(1)
            bar.set_postfix_str(done)

        result = run_eval(model, tokenizer, config, spec, progress=progress)
    null = _null_reference(model, tokenizer, result, spec) if args.prompts else None

    data = json.dumps({"model": args.model, **result.to_dict(), **({"prompts_null": null} if null else {})}, indent=2)
    if args.json:
        emit(args, "", data)
        return 0
    print(f"{args.model} [{config}]" + (f", {args.limit} items per task" if args.limit else "")
          + (f", prefill in chunks of {spec.prefill_chunk} tokens" if spec.prefill_chunk else ""))
    print(result.table())
    if args.prompts:
        for line in _prompt_lines(result, null):
            print(line)
    if result.fidelity is not None:
        f = result.fidelity
        print(
            f"fidelity on {f.pairs} pairs of {f.source}: continuation NLL full {f.nll_full:.4f} / POP {f.nll_pop:.4f} "
            f"(ppl {f.ppl_full:.2f} / {f.ppl_pop:.2f}), top-1 agreement {100 * f.top1_agreement:.1f}%, "
            f"KL(full||POP) {f.kl:.4f} nats"
        )
    if args.out:
        write_text(args.out, data)
        print(f"wrote {args.out}")
    return 0


def _through_vllm(args: argparse.Namespace, config: Any, spec: Any) -> int:
    """``--runtime vllm``: the embedded tasks answered by vLLM with and without POP, graded and paired here."""
    from poptune.evaluate.vllm_eval import run_vllm_eval
    from poptune.models import load_tokenizer

    result = run_vllm_eval(vllm_model_dir(args), load_tokenizer(args.model), config, spec)
    data = json.dumps({"model": args.model, **result.to_dict()}, indent=2)
    if args.json:
        emit(args, "", data)
        return 0
    print(f"{args.model} [{config}] through vLLM" + (f", {args.limit} items per task" if args.limit else ""))
    print(result.table())
    changed = result.details["answers_changed"]
    print(f"answers changed against vLLM's full model: {changed['changed']} of {changed['items']} items")
    if args.out:
        write_text(args.out, data)
        print(f"wrote {args.out}")
    return 0


def _null_reference(model: Any, tokenizer: Any, result: Any, spec: Any) -> dict[str, Any] | None:
    """The null reference on the prompts the full model just answered (:mod:`poptune.evaluate.nullref`)."""
    from poptune.evaluate.answers import ITEMS_KEY
    from poptune.evaluate.nullref import null_reference

    rows = result.details.get(ITEMS_KEY, {}).get("full")
    if not rows:
        return None
    return null_reference(model, tokenizer, spec.prompts, rows, batch_size=spec.batch_size,
                          prefill_chunk=spec.prefill_chunk)


def _prompt_lines(result: Any, null: dict[str, Any] | None = None) -> list[str]:
    """The answers unchanged with their exact interval, the fidelity means and the references' drop, and the
    null reference's line beside them (the same figures for the full model under a harmless change)."""
    from poptune.evaluate.answers import ITEMS_KEY, summary
    from poptune.evaluate.changed import changed_interval
    from poptune.evaluate.suite import TaskRun

    sides = result.details.get(ITEMS_KEY, {})
    runs = {w: TaskRun({}, {"prompts": sorted(rows)}, {}, {ITEMS_KEY: rows}) for w, rows in sides.items()}
    figures = summary(runs.get("full"), runs["pop"]) if "pop" in runs else {}
    lines = [f"skipped as too long: {sum(result.details.get('skipped_too_long', {}).values())} prompts"]
    p = figures.get("prompts")
    if p:
        ci = changed_interval(int(p["changed"]), p["items"])
        at_most = changed_interval(int(p["changed"]), p["items"], one_sided=True).hi
        lines.append(f"answers unchanged {p['items'] - int(p['changed'])}/{p['items']} = {100 * (1 - ci.point):.1f}% "
                     f"[{100 * (1 - ci.hi):.1f}, {100 * (1 - ci.lo):.1f}] (exact Clopper-Pearson 95%); changed at most "
                     f"{100 * at_most:.1f}% at 95%; token agreement {100 * p['agreement']:.1f}%; full answer's "
                     f"log-lik/token under POP {p['loglik']:.3f} (full {p['full_loglik']:.3f})"
                     + (f", token probability {100 * p['prob']:.1f}% (full {100 * p['full_prob']:.1f}%)"
                        if p.get("prob") is not None and p.get("full_prob") is not None else ""))
    if null:
        from poptune.reports.prompts_lines import null_line

        lines.append(null_line(null))
    ref = figures.get("reference")
    if ref:
        d = ref["drop"]
        lines.append(f"references ({ref['items']} prompts): full {100 * ref['full']:.1f}%, "
                     f"POP {100 * ref['pop']:.1f}%, "
                     f"drop {d['mean']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}] pts")
    return lines
