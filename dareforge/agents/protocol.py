"""The agent protocol (DSGym / DARE-bench style): tags the model writes, and the messages it gets back.

A reply holds `<reasoning>...</reasoning>`, then either `<code>...</code>` (Python run in a persistent kernel)
or `<answer>...</answer>` (the episode ends; `predictions.csv`, or a question task's `answer.json`, in the
working directory is graded). A reply
may hold a last `<code>` block and the `<answer>`: the code runs, then the episode ends. The kernel's output
comes back as the next user message, truncated to `OUTPUT_CHARS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dareforge.schema import Task

OUTPUT_CHARS = 4000
"""Most characters of kernel output sent back to the model (head and tail are kept)."""
MAX_LISTED_COLUMNS = 60

SYSTEM_PROMPT = """\
You are an expert data scientist solving a tabular machine-learning task by writing and running Python code.

You work in turns. Each reply has this form:

<reasoning>
What you know so far and what you do next.
</reasoning>
<code>
# Python code to run now
</code>

The code runs in a persistent Jupyter kernel (variables, imports and fitted models survive between turns).
Its working directory holds the task's files (`train.csv`, `test.csv`; they are read-only) and is where you
write `predictions.csv`. After each <code> block you get its output as the next message: printed text,
warnings, the value of the last expression, or the error's traceback (long output is cut in the middle, so
print summaries, not whole tables).

When `predictions.csv` is written and you have checked it, finish with:

<reasoning>
Why the predictions are complete.
</reasoning>
<answer>
One short sentence saying that predictions.csv is written.
</answer>

Rules:
- Exactly one <code> block or one <answer> per reply. A reply may end with both: the code runs, then the task ends
  without showing you its output.
- You may run code at most {turns} times; each run may take at most {seconds} seconds and is stopped after that.
- CPU only; no internet; no package installation. pandas, numpy, scipy, scikit-learn and statsmodels are available.
- Only `predictions.csv` in the working directory is graded, against answers you cannot see.
"""


QUESTION_SYSTEM_PROMPT = """\
You are an expert data analyst answering a question about data files by writing and running Python code.

You work in turns. Each reply has this form:

<reasoning>
What you know so far and what you do next.
</reasoning>
<code>
# Python code to run now
</code>

The code runs in a persistent Jupyter kernel (variables and imports survive between turns). Its working
directory holds the task's files (read-only) and is where you write `answer.json`. After each <code> block you
get its output as the next message: printed text, warnings, the value of the last expression, or the error's
traceback (long output is cut in the middle, so print summaries, not whole tables).

When `answer.json` is written and you have checked it, finish with:

<reasoning>
Why the answer is right.
</reasoning>
<answer>
The answer, as written in answer.json.
</answer>

Rules:
- Exactly one <code> block or one <answer> per reply. A reply may end with both: the code runs, then the task ends
  without showing you its output.
- You may run code at most {turns} times; each run may take at most {seconds} seconds and is stopped after that.
- CPU only; no internet; no package installation. pandas, numpy, scipy, scikit-learn and statsmodels are available.
- Only `answer.json` in the working directory is graded: a JSON object {{"answer": <value>}} in the format the
  question asks for.
"""


@dataclass(frozen=True)
class Parsed:
    """What a reply asks for; `code` and `answer` are None when their tag is absent."""

    reasoning: str | None
    code: str | None
    answer: str | None
    extra_code_blocks: int = 0

    @property
    def empty(self) -> bool:
        return self.code is None and self.answer is None


_TAG = {
    name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)
    for name in ("reasoning", "code", "answer")
}
_OPEN_CODE = re.compile(r"<code>(.*)\Z", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"\A\s*```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def _strip_fence(code: str) -> str:
    match = _FENCE.match(code)
    return (match.group(1) if match else code).strip("\n")


def parse_reply(text: str) -> Parsed:
    """The tags of a reply. A `<code>` left open at the very end (a reply cut by the token limit) still counts."""
    reasoning = [m.strip() for m in _TAG["reasoning"].findall(text)]
    # Tags written inside the reasoning (e.g. "I will write <code> next") must not count as tags.
    outside = _TAG["reasoning"].sub("", text)
    blocks = [_strip_fence(m) for m in _TAG["code"].findall(outside)]
    answers = [m.strip() for m in _TAG["answer"].findall(outside)]
    if not blocks and not answers and (open_code := _OPEN_CODE.search(outside)):
        blocks = [_strip_fence(open_code.group(1))]
    blocks = [b for b in blocks if b.strip()]
    return Parsed(
        reasoning="\n\n".join(reasoning) or None,
        code=blocks[0] if blocks else None,
        answer=answers[-1] if answers else None,
        extra_code_blocks=max(0, len(blocks) - 1),
    )


def system_prompt(task: Task) -> str:
    template = QUESTION_SYSTEM_PROMPT if task.is_question else SYSTEM_PROMPT
    return template.format(turns=task.limits.turns, seconds=task.limits.seconds_per_execution)


def task_prompt(task: Task) -> str:
    """The first user message: the instruction and what the working directory holds (no private facts)."""
    lines = [task.instruction.strip(), "", "Files in the working directory:"]
    for f in sorted(task.public_files, key=lambda f: f.name):
        line = f"- `{f.name}` ({_size(f.size)}"
        if f.rows is not None:
            line += f", {f.rows} data lines"
        line += ")"
        if f.columns:
            shown = ", ".join(f.columns[:MAX_LISTED_COLUMNS])
            more = len(f.columns) - MAX_LISTED_COLUMNS
            line += f"; columns: {shown}" + (f" and {more} more" if more > 0 else "")
        lines.append(line)
    output = "answer.json" if task.is_question else "predictions.csv"
    lines += ["", f"Write `{output}` in the working directory, then finish with <answer>."]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def truncate(text: str, limit: int = OUTPUT_CHARS) -> str:
    """Keep the head and the tail of long output, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"
