"""A user's prompts file: the requests a study, an evaluation or a benchmark serves, read and checked.

Two formats:

- **JSON Lines** (any name but ``.txt``): one request per line, ``{"prompt": "..."}`` or an OpenAI-style
  ``{"messages": [{"role": "system"|"user"|"assistant"|..., "content": "..."}, ...]}`` (rendered with the
  tokenizer's chat template, the generation prompt added), each optionally with ``"max_tokens"`` (new tokens
  of its answer, default :data:`DEFAULT_MAX_TOKENS`) and ``"answer"`` (a reference answer, when the user has
  one). Blank lines are ignored.
- **Plain text** (``.txt``): one prompt per line, blank lines ignored.

Lines end at a newline only (``\\r\\n`` is one too); a byte-order mark starting the file is dropped.

Everything that can be wrong with the file is refused by :func:`read_prompts` with one line naming the line,
before any model is loaded; :func:`check_fit` refuses a file none of whose prompts fits the model's context.
A prompt's *text* stays in memory: what is stored (:func:`prompt_hash`) is its hash, its length and outcomes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poptune.errors import ConfigError

__all__ = ["DEFAULT_MAX_TOKENS", "JUDGES", "LIKELIHOOD", "PROMPTS", "PROMPT_TASKS", "REFERENCES", "ROLES",
           "PromptRequest", "check_fit", "encode", "prompt_hash",
           "prompt_record", "prompts_sha256", "read_prompts",
           "render", "render_all"]

#: The task name of a prompts workload (its outcome per item: 1 when POP's greedy answer is the full model's).
PROMPTS = "prompts"

#: The task name of a prompts workload judged on its references (items: the requests with an ``answer``; outcome
#: per item: 1 when the greedy answer contains the reference, for the full model and POP alike).
REFERENCES = "prompt_references"

#: The task name of a prompts workload judged on how likely POP keeps the full model's answer (outcome per item:
#: the mean probability of the full answer's tokens, teacher-forced after this configuration's prefill; in
#: [0, 1], so the paired drop and its interval apply unchanged, and the full model's own outcome is its side).
#: Unlike "unchanged" it moves smoothly: a near-tie that flips a greedy answer moves it by the tie's margin.
LIKELIHOOD = "prompt_likelihood"

#: The tasks a prompts file makes.
PROMPT_TASKS = (PROMPTS, REFERENCES, LIKELIHOOD)

#: ``--judge`` value -> the task it makes of a prompts file (what ``--max-drop`` bounds).
JUDGES = {"answers": PROMPTS, "references": REFERENCES, "likelihood": LIKELIHOOD}

#: New tokens of an answer when a request names no ``max_tokens``: enough to see whether an answer changed,
#: few enough that a study on a CPU generates each configuration's answers in seconds.
DEFAULT_MAX_TOKENS = 32

#: Roles a message may have (OpenAI's chat roles).
ROLES = ("system", "developer", "user", "assistant", "tool")

#: Largest ``max_tokens`` a request may ask for.
MAX_TOKENS_CAP = 1024


@dataclass(frozen=True)
class PromptRequest:
    """One request of a prompts file.

    Attributes:
        line: Its line number in the file (1-based), for messages.
        prompt: The prompt text, or None for a chat request.
        messages: The chat messages ``((role, content), ...)``, or None for a plain prompt.
        max_tokens: New tokens of the answer.
        answer: The user's reference answer, if any.
        stop: Stop sequences: the answer ends before the first of them (a task pack's item judged by likelihood,
            :mod:`poptune.evaluate.judges`, stops where its task does; a prompts file's requests have none).
        grade: The task's own metric of a generated answer's text, in [0, 1] (a task pack's item judged by
            likelihood: its accuracy, recorded beside the likelihood so that the study can say what an accuracy
            verdict on the same items would cost); None for a prompts file's requests.
    """

    line: int
    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None
    max_tokens: int = DEFAULT_MAX_TOKENS
    answer: str | None = None
    stop: tuple[str, ...] = ()
    grade: Callable[[str], float] | None = field(default=None, compare=False, repr=False)


def prompt_hash(text: str) -> str:
    """What a study stores in place of a prompt: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read_prompts(path: str | Path) -> tuple[PromptRequest, ...]:
    """The requests of a prompts file (module docstring), checked; read once per process while the file is
    unchanged (every later call, even once the file is gone, gives the same requests).

    Lines end at ``\\n`` alone (``\\r\\n`` too): a U+2028, U+0085 or form feed inside a prompt or a JSON string
    is part of it. A byte-order mark starting the file is dropped.

    Raises:
        ConfigError: a missing or empty file (or one that is not a regular file), a line that is not JSON or not
            an object, a request without ``prompt``/``messages`` (or with both), an empty prompt, a message
            without a known role or non-empty text content, a ``max_tokens`` that is not an integer in
            [1, 1024], an ``answer`` that is not non-empty text, a request repeated on another line.
    """
    return _load(path)[0]


def prompts_sha256(path: str | Path) -> str:
    """The SHA-256 of the prompts file's bytes, as :func:`read_prompts` read them: what a resumed study compares
    (the file's content, wherever it lies now)."""
    return _load(path)[1]


#: Prompts files read in this process: real path -> (size, mtime, inode), requests, sha256.
_READ: dict[str, tuple[tuple[int, int, int] | None, tuple[PromptRequest, ...], str]] = {}


def _load(path: str | Path) -> tuple[tuple[PromptRequest, ...], str]:
    file = Path(path).expanduser()
    key = os.path.realpath(file)
    try:
        info = os.stat(file)
        signature = (info.st_size, info.st_mtime_ns, info.st_ino)
    except OSError:
        info, signature = None, None
    cached = _READ.get(key)
    if cached is not None and (signature is None or cached[0] == signature):
        return cached[1], cached[2]
    if info is None or not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"`--prompts` {path} is not a file")
    try:
        data = file.read_bytes()
        text = data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"`--prompts` {path} cannot be read as UTF-8 text: {e}") from e
    requests = _parse(path, file, text)
    digest = hashlib.sha256(data).hexdigest()
    _READ[key] = (signature, requests, digest)
    return requests, digest


def _parse(path: str | Path, file: Path, text: str) -> tuple[PromptRequest, ...]:
    lines = [(n, line.removesuffix("\r")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not lines:
        raise ConfigError(f"`--prompts` {path} holds no prompt (the file is empty)")
    if file.suffix.lower() == ".txt":
        requests = tuple(PromptRequest(n, line, None) for n, line in lines)
    else:
        requests = tuple(_request(path, n, line) for n, line in lines)
    seen: dict[tuple[Any, ...], int] = {}
    for r in requests:  # a repeat is the same item twice: it would count as independent evidence
        first = seen.setdefault((r.prompt, r.messages, r.max_tokens), r.line)
        if first != r.line:
            raise ConfigError(f"`--prompts` {path} line {r.line} repeats line {first} (the same request): each "
                              "request is one item, remove the repeats")
    return requests


def _request(path: str | Path, n: int, line: str) -> PromptRequest:
    where = f"`--prompts` {path} line {n}"
    from poptune.jsonfile import loads

    data = loads(line, where, hint="; a JSON Lines file has one object per line, a .txt file one prompt per line")
    if not isinstance(data, dict):
        raise ConfigError(f"{where} is not a JSON object, got {type(data).__name__}")
    has_prompt, has_messages = "prompt" in data, "messages" in data
    if has_prompt == has_messages:
        raise ConfigError(f"{where} needs exactly one of `prompt` or `messages`, got keys {sorted(data)}")
    max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise ConfigError(f"{where}: `max_tokens` must be an integer in [1, {MAX_TOKENS_CAP}], got {max_tokens!r}")
    answer = data.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise ConfigError(f"{where}: `answer` must be text, got {type(answer).__name__}")
    if answer is not None and not answer.strip():  # every answer contains "": it would judge nothing
        raise ConfigError(f"{where}: `answer` must be non-empty text (or absent)")
    if has_prompt:
        if not isinstance(data["prompt"], str) or not data["prompt"].strip():
            raise ConfigError(f"{where}: `prompt` must be non-empty text")
        return PromptRequest(n, data["prompt"], None, max_tokens, answer)
    return PromptRequest(n, None, _messages(where, data["messages"]), max_tokens, answer)


def _messages(where: str, messages: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise ConfigError(f"{where}: `messages` must be a non-empty list of {{role, content}} objects")
    found = []
    for k, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ConfigError(f"{where}: message {k} must be an object with text `content`")
        if not message["content"].strip():  # as an empty `prompt` is refused
            raise ConfigError(f"{where}: message {k} has an empty `content`")
        role = message.get("role")
        if role not in ROLES:
            raise ConfigError(f"{where}: message {k} has an unknown role {role!r} (known: {', '.join(ROLES)})")
        found.append((role, message["content"]))
    return tuple(found)


def render(tokenizer: Any, request: PromptRequest) -> str:
    """The text the model is prompted with: a plain prompt as given; a chat through the tokenizer's chat
    template with the generation prompt (a tokenizer without one: ``role: content`` lines, then ``assistant:``).
    A system message goes first into the template (Gemma-3's folds it into the first user turn)."""
    if request.prompt is not None:
        return request.prompt
    assert request.messages is not None
    chat = [{"role": "system" if r == "developer" else r, "content": c} for r, c in request.messages]
    if getattr(tokenizer, "chat_template", None):
        try:
            return str(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        except Exception as e:  # jinja raises its own errors for conversations a template refuses
            raise ConfigError(f"`--prompts` line {request.line}: the tokenizer's chat template refuses it: {e}") from e
    return "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant:"


def render_all(tokenizer: Any, requests: Sequence[PromptRequest]) -> list[str]:
    return [render(tokenizer, r) for r in requests]


def encode(tokenizer: Any, request: PromptRequest) -> list[int]:
    """The prompt's token ids: a plain prompt with the tokenizer's special tokens (its BOS), a rendered chat
    as the template wrote it (the template writes its own BOS)."""
    return list(tokenizer(render(tokenizer, request), add_special_tokens=request.prompt is not None)["input_ids"])


def check_fit(tokenizer: Any, requests: Sequence[PromptRequest], max_positions: int | None,
              path: str | Path = "") -> list[int]:
    """Each request's prompt length in tokens; refuses a file none of whose prompts fits the context.

    A prompt fits when it and its ``max_tokens`` new tokens fit ``max_positions`` (those that do not are
    skipped and counted by the workload, never truncated).

    Raises:
        ConfigError: every prompt is too long.
    """
    lengths = [len(encode(tokenizer, r)) for r in requests]
    if max_positions is not None and all(n + r.max_tokens > max_positions for n, r in zip(lengths, requests)):
        raise ConfigError(f"`--prompts` {path}: every prompt is too long for this model's {max_positions} positions "
                          f"(shortest: {min(lengths)} tokens, with its answer's new tokens)")
    return lengths


def prompt_record(tokenizer: Any, path: str, order: Sequence[int], tokens: Sequence[int], skipped: int, *,
                  store_text: bool = False) -> dict[str, Any]:
    """What a study stores of its prompts: per scored request (in scoring order) its index in the file, the
    hash of its rendered text and its length in tokens, and how many were skipped; the text only with
    ``store_text`` (``--store-prompts``)."""
    requests = read_prompts(path)
    texts = [render(tokenizer, requests[i]) for i in order]
    record: dict[str, Any] = {"requests": len(requests), "skipped_too_long": skipped, "index": list(order),
                              "hash": [prompt_hash(t) for t in texts], "tokens": list(tokens),
                              "references": sum(r.answer is not None for r in requests)}
    if store_text:
        record["text"] = texts
    return record
