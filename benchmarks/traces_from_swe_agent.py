"""Convert SWE-agent trajectories into a traces file tuner replays (`--traces`).

Source: the SWE-agent repository (https://github.com/SWE-agent/SWE-agent, MIT License,
Copyright (c) 2024 John Yang, Carlos E. Jimenez, Alexander Wettig, Shunyu Yao, Karthik
Narasimhan, Ofir Press). `SOURCES` names the `.traj` files read, one per distinct task: the
EnIGMA CTF demonstrations, the SWE-bench (marshmallow-1867) and HumanEvalFix demonstrations, and
two recorded GPT-4 runs from its test data (pydicom-1458, the test repo's issue 1). Each is a
JSON object whose "history" is the list of messages the agent exchanged with its model: the
system prompt (the command reference), the task, then assistant turns (a thought and one command
in a fenced block) each followed by the environment's real output as a user message, the way
SWE-agent's text protocol sends it. The observations are the real tool outputs of those runs.

Each trajectory becomes one JSONL line: a JSON list of plain-text chat messages, roles system,
user and assistant only (a "tool" message would become a user message; no `tool_calls`: the CPU
preset's SmolLM2 has no tool-call parser and the replay uses the text protocol). Messages
marked `is_demo` (an in-context demonstration SWE-agent pasted into the GPT-4 runs' prompts,
~5-8k tokens of another trajectory) are left out. Each conversation is cut after its last whole
assistant turn such that the whole conversation rendered with the SmolLM2 chat template (what
the last replayed request holds: its prompt plus the forced answer) is at most `--max-tokens`
(6,000; the model's max_model_len is 8,192) tokens; the observation after the last kept
assistant turn is dropped (a replay never sends it). A trajectory with fewer than 2 assistant
turns left is skipped and named on stderr.

    python -m benchmarks.traces_from_swe_agent --git-dir /path/to/SWE-agent.git \\
        --out benchmarks/data/traces/swe-agent-demos.jsonl

(`--git-dir` is a clone, bare or not, of SWE-agent; `--commit` picks the revision, HEAD by
default.) It prints the commit and, per conversation, its source, assistant turns and tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCES = (
    "trajectories/demonstrations/replay__marshmallow-code__marshmallow-1867__default__t-0.20__"
    "p-0.95__c-2.00__install-1___install_from_source/marshmallow-code__marshmallow-1867.traj",
    "tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95"
    "__c-3.00__install-1/pydicom__pydicom-1458.traj",
    "tests/test_data/trajectories/gpt4__swe-agent__test-repo__default_from_url__t-0.00__p-0.95"
    "__c-3.00__install-1/swe-agent__test-repo-i1.traj",
    "trajectories/demonstrations/human_thought__swe-bench-HumanEvalFix-python__lcb__t-0.00__"
    "p-0.95__c-4.00__install-0/humanevalfix-python-0.traj",
    "trajectories/demonstrations/ctf/crypto/BabyEncryption.traj",
    "trajectories/demonstrations/ctf/crypto/BabyTimeCapsule.traj",
    "trajectories/demonstrations/ctf/crypto/eps.traj",
    "trajectories/demonstrations/ctf/crypto/katy.traj",
    "trajectories/demonstrations/ctf/forensics/flash.traj",
    "trajectories/demonstrations/ctf/misc/networking_1.traj",
    "trajectories/demonstrations/ctf/pwn/warmup.traj",
    "trajectories/demonstrations/ctf/rev/rock.traj",
    "trajectories/demonstrations/ctf/web/i_got_id_demo.traj",
)
MIN_TURNS = 2
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "user"}


def _text(content: Any) -> str:
    """A message's content as text (a list of parts keeps its text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def messages_of(trajectory: dict[str, Any]) -> list[dict[str, str]]:
    """The plain-text chat messages of a trajectory's history (demonstrations left out)."""
    out: list[dict[str, str]] = []
    for message in trajectory["history"]:
        if message.get("is_demo") or message.get("role") not in ROLES:
            continue
        text = _text(message.get("content"))
        if text:
            out.append({"role": ROLES[message["role"]], "content": text})
    return out


def truncate(
    messages: list[dict[str, str]], count: Callable[[list[dict[str, str]]], int], max_tokens: int
) -> list[dict[str, str]]:
    """The longest prefix of `messages` that ends on an assistant message and whose rendering
    `count(prefix)` is at most `max_tokens` ([] when not even the first assistant turn fits)."""
    best: list[dict[str, str]] = []
    for end, message in enumerate(messages, start=1):
        if message["role"] != "assistant":
            continue
        if count(messages[:end]) > max_tokens:
            break
        best = messages[:end]
    return best


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", required=True, help="a clone of SWE-agent (its .git dir)")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-tokens", type=int, default=6000)
    parser.add_argument("--tokenizer", help="SmolLM2's tokenizer dir (default: tuner's cache)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from tuner.models import model_dir
    from tuner.settings import get_settings

    tokenizer = args.tokenizer or model_dir("smollm2-135m", get_settings().cache_path())
    tok = AutoTokenizer.from_pretrained(str(tokenizer))

    def count(messages: list[dict[str, str]]) -> int:
        return len(tok.apply_chat_template(messages, tokenize=True, return_dict=False))

    commit = _git(args.git_dir, "rev-parse", args.commit).strip()
    print(f"SWE-agent commit {commit}")
    lines: list[str] = []
    for path in SOURCES:
        messages = messages_of(json.loads(_git(args.git_dir, "show", f"{commit}:{path}")))
        kept = truncate(messages, count, args.max_tokens)
        turns = sum(m["role"] == "assistant" for m in kept)
        total = sum(m["role"] == "assistant" for m in messages)
        if turns < MIN_TURNS:
            print(f"skipped {path}: {turns} assistant turns fit", file=sys.stderr)
            continue
        lines.append(json.dumps(kept, ensure_ascii=False))
        print(
            f"line {len(lines)}: {path.rsplit('/', 1)[-1]}: {turns}/{total} assistant turns, "
            f"{len(kept)} messages, {count(kept)} tokens"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} conversations to {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
