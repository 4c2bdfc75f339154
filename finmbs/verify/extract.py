"""Final-answer extraction from a worked solution: \\boxed{...}, "Final answer: ...", "Answer: ..."."""

from __future__ import annotations

import re

from finmbs.llm.structured import strip_think

_FINAL = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:：]\s*(.+)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        rest = text[start + len("\\boxed") :].strip()
        return rest.split()[0].rstrip("$.") if rest else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def extract_final_answer(text: str) -> str | None:
    """The final answer of a solution: the last \\boxed{}, else the last "Final answer:" line."""
    text = strip_think(text or "")
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed:
        return boxed
    matches = _FINAL.findall(text)
    if not matches:
        return None
    answer = matches[-1].strip().strip("*").rstrip(".").strip()
    answer = re.sub(r"^\$+|\$+$", "", answer).strip()
    return answer.rstrip(".").strip() or None
