"""A scripted arithmetic world for the MBS engine, served by the real ScriptedOpenAIServer.

Problems read "Compute EXPR." with EXPR built from integers, + - * and parentheses. The world
computes true answers. Each endpoint (by model name) is an `Agent` that solves a problem by rule:
accuracy 1 when the problem has at most `capacity` operations, `partial` at capacity+1, 0 beyond
(`table` overrides by operation count); shown worked examples whose operators cover the problem's,
its capacity grows by `boost`. Sample i of a request is correct when floor((i+1)p) > floor(ip), so
any N gives floor(N p) correct samples. A reply needs 4 + `words_per_op` * ops words; past the
request's max_tokens it is cut and ends with finish_reason "length" (the answer stays up front).

Teachers answer the structured tasks: decomposition into the compound operands plus one example of
the top operator on the operand values with the right one plus 1 (with `reveal_answer`, the parent's
own last step, whose answer is the parent's; with `restate_parent`, the parent itself first); an unhelpful
"Compute 2 - 1." while fewer than
`bad_decompositions` failed attempts are in the prompt; wrong answers with `wrong_child_answers`);
harder leaf variants (variant s adds s+1 operations; a `lazy` teacher only renumbers, a `parrot` one
restates the leaf as its first variant; asked by a named operator, one variant that multiplies the leaf
by a factor its operator's name gives, or for a `lazy` teacher the leaf renumbered); composition by
substituting the synthetic children into the original parent; direct synthesis by renumbering the
seed (a `parrot` teacher restates the seed: "Now, Compute EXPR."). Tasks in `malformed` first get unparseable JSON.
The judge finds every problem well-posed but those whose expression is in `ill_posed`.
Asked for programs (`verify.programs`), a teacher adds to every worked problem "answer = EXPR" (a
composed parent calls `child_k()` for its synthetic children where the prompt offers them); with
`wrong_programs` a program adds 1, with `bad_program` every program is that text instead. Asked for a
decomposed parent's program, a teacher writes the parent's expression with each child's expression it
contains replaced by `child_k()` (plus 1 with `wrong_parent_programs`). Asked to state one step of a
program (`stages.decompose_from_program`), a teacher writes "Compute EXPR." with EXPR the step's
statements inlined (plus 1, stated with its own right answer, for a step whose variable is in `off_slices`).
"""

from __future__ import annotations

import ast
import json
import math
import re
import zlib
from dataclasses import dataclass, field

from finmbs.config import RunConfig
from finmbs.testing.server import Reply, Request

# phrases of the prompt templates that name each task (tests check the templates contain them)
TASK_MARKERS = {
    "compose": "Combine the synthetic children",
    "leaf": "harder than the leaf",
    "leaf_operator": "by applying the change below",
    "decompose": "easier, independent, self-contained subproblems",
    "direct": "novel and not a simple rewrite",
    "conditioned": "Study the solved child problems",
    "well_posed": "is the problem well-posed?",
    "program_write": "Write a short Python program that solves",
    "program_parent": "using its subproblems where it needs their results",
    "decompose_slice": "asks for exactly this step",
    "decompose_slice_ask": "Write one new final question for the problem",
}
PROGRAM_MARKER = '"program":'  # a reply template asking for programs (verify.programs)
SPANS_MARKER = '"figures": [{"name"'  # ... whose document figures are chosen among listed spans (verify.quote_spans)
REPAIR_MARKER = "could not be used"
_LISTED = re.compile(r'^\[\d+\] "(.+)" = (\d+)(?: |$)', re.MULTILINE)  # prompts/program_figures.txt's lines


def choosing_program(expr: str, prompt: str) -> dict:
    """verify.quote_spans: the figures of EXPR chosen among the whole numbers the prompt lists, as
    {"figures": [{"name", "figure"}], "program": "answer = EXPR" over those names}."""
    listed: dict[int, str] = {}
    for text, number in _LISTED.findall(prompt):
        listed.setdefault(int(number), text)
    chosen: dict[int, str] = {}

    def name(m: re.Match[str]) -> str:
        number = int(m.group())
        if number not in listed:
            return m.group()
        return chosen.setdefault(number, f"figure_{len(chosen) + 1}")

    program = "answer = " + re.sub(r"\d+", name, expr)
    return {"figures": [{"name": n, "figure": listed[v]} for v, n in chosen.items()], "program": program}


_QUESTION = re.compile(r"Compute\s+(.+?)\.\s*$", re.MULTILINE)
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def parse(expr: str) -> ast.expr:
    tree = ast.parse(expr.strip(), mode="eval").body
    for node in ast.walk(tree):
        if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.USub, ast.Constant, ast.operator)) or (
            isinstance(node, ast.Constant) and not isinstance(node.value, int)
        ):
            raise ValueError(f"not world arithmetic: {expr}")
    return tree


def value(expr: str) -> int:
    return int(eval(compile(ast.Expression(parse(expr)), "<world>", "eval")))  # noqa: S307 (checked above)


def operators(expr: str) -> list[str]:
    return [_OPS[type(n.op)] for n in ast.walk(parse(expr)) if isinstance(n, ast.BinOp)]


def norm(expr: str) -> str:
    return ast.unparse(parse(expr))


def question(expr: str) -> str:
    return f"Compute {norm(expr)}."


def expression(text: str) -> str:
    """The expression of the first "Compute EXPR." in `text`."""
    match = _QUESTION.search(text)
    if not match:
        raise ValueError(f"no problem in: {text[:200]!r}")
    return match.group(1)


def blocks(text: str, tag: str) -> list[str]:
    """The texts between <tag>...</tag>, or between judge prompts' fenced <tag_NONCE>...</tag_NONCE>."""
    return [m.group(2) for m in re.finditer(rf"<{tag}(_[0-9a-f]{{16}}|)>(.*?)</{tag}\1>", text, re.DOTALL)]


@dataclass
class Agent:
    """How one endpoint solves and writes problems."""

    capacity: int = 99
    partial: float = 0.0
    boost: int = 0
    table: dict[int, float] = field(default_factory=dict)
    lazy: bool = False
    parrot: bool = False
    program: str | None = None  # the program this agent writes when asked for one alone (program_write)
    programs: tuple[str, ...] = ()  # ... or these, one per request in turn (the last one repeated)
    drawn: int = 0  # programs of `programs` written so far

    def accuracy(self, ops: int, covered: bool) -> float:
        if ops in self.table:
            return self.table[ops]
        capacity = self.capacity + (self.boost if covered else 0)
        return 1.0 if ops <= capacity else self.partial if ops == capacity + 1 else 0.0


def worked(expr: str, answer: int | None = None) -> dict[str, str]:
    answer = value(expr) if answer is None else answer
    return {"question": question(expr), "solution": f"Evaluate {norm(expr)} = {answer}.", "answer": str(answer)}


@dataclass
class World:
    """The request handler: `server.handler = World(agents={...})`."""

    agents: dict[str, Agent]
    words_per_op: int = 6
    bad_decompositions: int = 0
    wrong_child_answers: bool = False
    reveal_answer: bool = False
    restate_parent: bool = False
    malformed: set[str] = field(default_factory=set)
    ill_posed: set[str] = field(default_factory=set)  # normalized expressions the judge rejects
    trace_note: str = ""  # a sentence every solution writes before its answer (a figure its work mentions)
    wrong_programs: bool = False
    bad_program: str | None = None
    one_line_programs: bool = False  # programs with two statements on one line (`value = ... answer = value`)
    printed_programs: bool = False  # programs that print their value and bind no answer (`value = ...\nprint(value)`)
    wrong_parent_programs: bool = False
    off_slices: set[str] = field(default_factory=set)  # steps stated as a problem one more than their value

    def __call__(self, request: Request) -> Reply:
        task_text = request.messages[0]["content"] if request.messages else request.text
        task = next((name for name, marker in TASK_MARKERS.items() if marker in task_text), "solve")
        agent = self.agents[request.model.split("/")[-1]]
        if task in ("solve", "conditioned"):
            return self.solve(agent, request, task_text)
        if task in self.malformed and REPAIR_MARKER not in request.text:
            return Reply(texts=['{"subproblems": [oops'])
        if task == "program_write":  # asked for a plain ```python block, not JSON; n drawn in turn
            drawn = [self.program_write(agent, task_text)["program"] for _ in range(request.n)]
            return Reply(texts=[f"Here is the program:\n```python\n{program}\n```" for program in drawn])
        reply = getattr(self, task)(agent, task_text)
        if PROGRAM_MARKER in task_text and task not in ("program_write", "program_parent"):
            self.with_programs(reply, task_text)
        return Reply(texts=[json.dumps(reply)])

    # programs ---------------------------------------------------------------------------------
    def program(self, expr: str) -> str:
        if self.bad_program is not None:
            return self.bad_program
        if self.one_line_programs:
            return f"value = {norm(expr)} answer = value" + (" + 1" if self.wrong_programs else "")
        if self.printed_programs:
            return f"value = {norm(expr)}" + (" + 1" if self.wrong_programs else "") + "\nprint(value)"
        return f"answer = {norm(expr)}" + (" + 1" if self.wrong_programs else "")

    def with_programs(self, reply: dict, text: str = "") -> None:
        """Every worked problem of `reply` gets its program (a composed one may have one already); asked to
        choose the document's figures among those `text` lists (verify.quote_spans), it names them."""
        items = [reply] if "question" in reply else [i for v in reply.values() if isinstance(v, list) for i in v]
        for item in items:
            if isinstance(item, dict) and "question" in item:
                if SPANS_MARKER in text and self.bad_program is None and "program" not in item:
                    item.update(choosing_program(norm(expression(item["question"])), text))
                    continue
                program = item.get("program") or self.program(expression(item["question"]))
                item["program"] = self.bad_program if self.bad_program is not None else program

    def program_write(self, agent: Agent, text: str) -> dict:
        if agent.programs:
            agent.drawn += 1
            return {"program": agent.programs[min(agent.drawn, len(agent.programs)) - 1]}
        if agent.program is not None:
            return {"program": agent.program}
        return {"program": self.program(expression(blocks(text, "problem")[0]))}

    def program_parent(self, agent: Agent, text: str) -> dict:
        calls = norm(expression(blocks(text, "problem")[0]))
        for k, expr in re.findall(r"^- child_(\d+)\(\) returns \S+; its problem: Compute (.+?)\.$", text, re.MULTILINE):
            calls = calls.replace(norm(expr), f"child_{k}()", 1)
        return {"program": f"answer = {calls}" + (" + 1" if self.wrong_parent_programs else "")}

    # solving ----------------------------------------------------------------------------------
    def solve(self, agent: Agent, request: Request, text: str) -> Reply:
        expr = expression(blocks(text, "problem")[-1])
        ops = operators(expr)
        shown = {op for block in blocks(text, "example") for op in operators(expression(block))}
        p = agent.accuracy(len(ops), covered=bool(shown) and set(ops) <= shown)
        first = int(request.body.get("seed", 0))
        budget = int(request.body.get("max_tokens") or 10**6)
        texts, reasons = [], []
        for i in range(first, first + request.n):
            correct = math.floor((i + 1) * p) > math.floor(i * p)
            answer = value(expr) + (0 if correct else 1)
            words = 4 + self.words_per_op * len(ops)
            if words > budget:
                texts.append(f"\\boxed{{{answer}}} " + " ".join(["step"] * (budget - 1)))
                reasons.append("length")
            else:
                texts.append(" ".join(["step"] * (words - 4)) + f"{self.trace_note} Final answer: \\boxed{{{answer}}}")
                reasons.append("stop")
        return Reply(texts=texts, finish_reasons=reasons)

    # teacher tasks ----------------------------------------------------------------------------
    def decompose(self, agent: Agent, text: str) -> dict:
        if text.count("<failed>") < self.bad_decompositions:
            return {"skills": ["subtraction"], "subproblems": [worked("2 - 1")]}
        tree = parse(expression(blocks(text, "problem")[0]))
        if not isinstance(tree, ast.BinOp):
            return {"skills": [], "subproblems": [worked("2 + 3")]}
        parts = [ast.unparse(side) for side in (tree.left, tree.right) if isinstance(side, ast.BinOp)]
        left, right = value(ast.unparse(tree.left)), value(ast.unparse(tree.right))
        # one example of the top operator; with `reveal_answer` it is the parent's own last step
        skill = f"{left} {_OPS[type(tree.op)]} {right + (0 if self.reveal_answer else 1)}"
        shift = 1 if self.wrong_child_answers else 0
        children = [worked(e, value(e) + shift) for e in [*parts, skill]]
        if self.restate_parent:  # the parent itself first, as small teachers write it
            children.insert(0, worked(ast.unparse(tree)))
        return {"skills": sorted(set(operators(ast.unparse(tree)))), "subproblems": children}

    def decompose_slice(self, agent: Agent, text: str) -> dict:
        """One step of a program (`x = 2 * 3\nanswer = x`) stated as "Compute EXPR." with its names inlined."""
        return worked(self.step_expression(text))

    def decompose_slice_ask(self, agent: Agent, text: str) -> dict:
        """stages.slice_asks: the step's final question alone, "Compute EXPR." (off_slices as above)."""
        return {"ask": question(self.step_expression(text))}

    def step_expression(self, text: str) -> str:
        inlined: dict[str, str] = {}
        for statement in ast.parse(blocks(text, "step")[0]).body:
            assert isinstance(statement, ast.Assign), "world steps are assignments"
            expr = ast.unparse(statement.value)
            for name, value in inlined.items():
                expr = re.sub(rf"\b{name}\b", f"({value})", expr)
            inlined[statement.targets[0].id] = expr  # type: ignore[attr-defined]
        step = re.search(r"the step computes (\w+)", text).group(1)  # type: ignore[union-attr]
        return inlined["answer"] + (" + 1" if step in self.off_slices else "")

    def leaf(self, agent: Agent, text: str) -> dict:
        expr = norm(expression(blocks(text, "problem")[0]))
        n = int(re.search(r"(?:Generate|holding) (\d+)", text).group(1))  # type: ignore[union-attr]
        if agent.lazy:
            return {"variants": [worked(renumber(expr, s + 1)) for s in range(n)]}
        variants = [worked(f"({expr})" + "".join(f" + {k + 1}" for k in range(s + 1))) for s in range(n)]
        if agent.parrot:  # the first "variant" restates the leaf
            variants[0] = {**worked(expr), "question": f"Now, {question(expr)}"}
        return {"variants": variants}

    def leaf_operator(self, agent: Agent, text: str) -> dict:
        """One variant by the named operator: the leaf times a factor taken from the operator's name (a
        `lazy` teacher ignores the operator and only adds that factor to each number: the leaf's structure)."""
        expr = norm(expression(blocks(text, "problem")[0]))
        name = re.search(r"Change to apply \((\w+)\)", text).group(1)  # type: ignore[union-attr]
        factor = zlib.crc32(name.encode()) % 97 + 2  # distinct for each shipped math operator
        return worked(renumber(expr, factor) if agent.lazy else f"({expr}) * {factor}")

    def compose(self, agent: Agent, text: str) -> dict:
        pattern = blocks(text, "pattern")[0]
        parent = norm(expression(blocks(pattern, "parent")[0]))
        originals = [norm(expression(b)) for b in blocks(pattern, "child")]
        synthetic = [norm(expression(b)) for b in blocks(text.split("</pattern>", 1)[1], "example")]
        composed = calls = parent
        for k, (original, new) in enumerate(zip(originals, synthetic), 1):
            composed = composed.replace(original, f"({new})", 1)
            calls = calls.replace(original, f"child_{k}()", 1)
        if composed == parent:
            composed = " + ".join(f"({s})" for s in synthetic)
            calls = " + ".join(f"child_{k}()" for k in range(1, len(synthetic) + 1))
        result = worked(composed)
        if "child_1()" in text and PROGRAM_MARKER in text:  # the children's programs are offered as functions
            result["program"] = f"answer = {calls}" + (" + 1" if self.wrong_programs else "")
        return result

    def well_posed(self, agent: Agent, text: str) -> dict:
        expr = norm(expression(blocks(text, "question")[0]))
        posed = expr not in {norm(e) for e in self.ill_posed}
        return {"reason": f"{expr}: {'every' if posed else 'not every'} operand is stated", "well_posed": posed}

    def direct(self, agent: Agent, text: str) -> dict:
        expr = norm(expression(blocks(text, "problem")[0]))
        n = int(re.search(r"(?:Generate|holding) (\d+)", text).group(1))  # type: ignore[union-attr]
        if agent.parrot:
            return {"problems": [{**worked(expr), "question": f"Now, {question(expr)}"}] * n}
        return {"problems": [worked(renumber(expr, s + 1)) for s in range(n)]}


def renumber(expr: str, shift: int) -> str:
    """The same expression with every integer increased by `shift` (a shallow variant)."""
    return re.sub(r"\d+", lambda m: str(int(m.group()) + shift), expr)


def world_config(
    base_url: str,
    teachers: list[str],
    students: list[str],
    target: str,
    cache_path: str,
    *,
    programs: bool = True,
    **stages: object,
) -> RunConfig:
    """A RunConfig whose roles are endpoints of the world's server (chat, `n` supported); `programs`:
    verify.programs (the teachers write programs; off: the paper's trace rule alone). The engine's
    program operators and program-verified roots are off unless a test names them in `stages`: the
    world's "Compute EXPR." problems end with no question sentence to reword, and its tests count the
    teacher-written path's calls (tests/test_engine_leaves.py runs the engine's)."""
    stages = {"program_operators": False, "program_roots": False, "engine_compose": False, **stages}

    def endpoint(name: str, **extra: object) -> dict:
        return dict(
            name=name,
            model=f"openai/{name}",
            api_base=base_url,
            max_concurrency=16,
            temperature=1.0,
            max_tokens=4096,
            timeout_s=10.0,
            max_retries=2,
            **extra,
        )

    return RunConfig.model_validate(
        {
            "domain": "math",
            "roles": {
                "teachers": [endpoint(t) for t in teachers],
                "students": [endpoint(s, supports_n=True) for s in students],
                "target": endpoint(target, supports_n=True),
                "judge": endpoint(teachers[0]),
            },
            "stages": stages,
            "cache_path": cache_path,
            "seed_concurrency": 4,
            "verify": {"programs": programs},
        }
    )
