"""A program's structure with its figures and names abstracted away (`novelty.structure`, finmbs's).

Two programs have the same skeleton when they compute their answer by the same operations over the
same data flow, whatever their numbers, variable names and line breaks. A harder variant whose program
has its source's skeleton is the source with new numbers, however its question is worded.

- Straight-line programs (assignments, imports, bare expressions): the skeleton is the expression that
  computes `answer`, every assigned name replaced by the expression it was bound to (so splitting a
  line in two, or merging two, changes nothing; a step the answer does not use is not part of it),
  every number and string a placeholder `C`, a `quote(...)` (finance: a figure of the passage) an input
  `C` too, a conversion or rounding (`int(x)`, `round(x, 2)`, `Fraction(x)`) its argument, and the
  operands of + and * (associative and commutative) flattened and sorted.
- Any other program (a branch, a loop, a function): the canonical AST dump (`ast.dump`, no positions),
  bound names replaced by their order of binding (`v0`, `v1`, ...) and constants by `C`.

Names a program never binds (math, round, min) are operations and stay as written. Imports and
docstrings are dropped. A program that does not parse or never binds `answer` has no skeleton (None).
"""

from __future__ import annotations

import ast

from finmbs.errors import FinmbsError
from finmbs.verify.program import parse_program

ANSWER = "answer"
CONSTANT = "C"
MAX_CHARS = 20_000  # an inlined expression longer than this (a name used many times) falls back to the dump
_FLAT = (ast.Add, ast.Mult)  # associative and commutative: operand order is no structure
# calls that only convert or round their first argument: `int(total // 20)` computes what `total // 20` does
CONVERSIONS = frozenset({"int", "float", "round", "Fraction", "Decimal"})
_STRAIGHT = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.Expr, ast.Pass)


def skeleton(source: str) -> str | None:
    """The program's skeleton (module docstring), or None when it does not parse or binds no answer."""
    tree = parse_program(source)  # too long or too deep to parse safely: None as well
    if tree is None or not _binds(tree, ANSWER):
        return None
    tree = _Abstracted(_bound_names(tree), constants=False).visit(tree)
    if all(isinstance(s, _STRAIGHT) for s in tree.body):
        flow = _flow(tree)
        if flow is not None:
            return f"flow: {flow}"
    return f"ast: {_dump(tree)}"


def same_structure(a: str, b: str) -> bool | None:
    """Whether two programs share a skeleton; None when either has none."""
    x, y = skeleton(a), skeleton(b)
    return None if x is None or y is None else x == y


def assigned(statement: ast.stmt) -> list[str]:
    """The names a simple assignment statement binds, in order (`x = ...`, `a = b = ...`, `x += ...`,
    `x: float = ...`); [] for any other statement, and for a target that is no plain name (a tuple, an
    item, an attribute) or a bare annotation, which binds nothing. The operators' and the slices' one
    reading of what a top-level step binds."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AugAssign) or (isinstance(statement, ast.AnnAssign) and statement.value):
        targets = [statement.target]
    else:
        return []
    return [t.id for t in targets if isinstance(t, ast.Name)]


SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign)


def stored(node: ast.AST) -> set[str]:
    """The names a statement binds (targets, loop variables, imports, definitions), anywhere inside it."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def loaded(node: ast.AST) -> set[str]:
    """The names a statement reads (an augmented assignment reads its target too)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        names.add(node.target.id)
    return names


class Flow:
    """The data flow of a program's top-level statements: which earlier statements each one reads from."""

    def __init__(self, body: list[ast.stmt]):
        self.body = body
        self.stores = [stored(s) for s in body]
        self.deps: list[set[int]] = [self._reaching(i) for i in range(len(body))]

    def _definitions(self, name: str, before: int) -> set[int]:
        """The statements before `before` whose binding of `name` may reach it: the last one, and the ones
        before it while the last may not bind it (a loop, an `if`, a `try`)."""
        found = set()
        for j in range(before - 1, -1, -1):
            if name in self.stores[j]:
                found.add(j)
                if isinstance(self.body[j], SIMPLE + (ast.Import, ast.ImportFrom)):
                    break
        return found

    def _reaching(self, i: int) -> set[int]:
        return {j for name in loaded(self.body[i]) for j in self._definitions(name, i)}

    def closure(self, i: int) -> set[int]:
        """Statement `i` and every statement it depends on, transitively (its backward slice)."""
        seen, todo = set(), [i]
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(self.deps[j])
        return seen

    def distances(self, i: int) -> dict[int, int]:
        """Steps from statement `i` back to each statement of its slice along the data flow."""
        dist, frontier = {i: 0}, [i]
        while frontier:
            nxt = []
            for j in frontier:
                for k in self.deps[j]:
                    if k not in dist:
                        dist[k] = dist[j] + 1
                        nxt.append(k)
            frontier = nxt
        return dist


def _binds(tree: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(tree))


class _TooLong(FinmbsError):
    pass


def _flow(tree: ast.Module) -> str | None:
    """The answer's expression with every binding inlined, or None when a binding is not one the
    inlining follows (a starred or attribute target, unpacking a non-tuple)."""
    env: dict[str, Shape | str] = {}
    try:
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if not _assign(env, target, stmt.value):
                        return None
            elif isinstance(stmt, ast.AnnAssign):
                if stmt.value is None or not _assign(env, stmt.target, stmt.value):
                    return None
            elif isinstance(stmt, ast.AugAssign):
                if not isinstance(stmt.target, ast.Name):
                    return None
                augmented = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
                env[stmt.target.id] = _render(augmented, env)
    except _TooLong:
        return None
    return repr(env[ANSWER]) if ANSWER in env else None


def _assign(env: dict[str, Shape | str], target: ast.expr, value: ast.expr) -> bool:
    if isinstance(target, ast.Name):
        env[target.id] = _render(value, env)
        return True
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
        if len(target.elts) != len(value.elts):
            return False
        rendered = [_render(v, env) for v in value.elts]  # right side first: `a, b = b, a`
        for t, r in zip(target.elts, rendered):
            if not isinstance(t, ast.Name):
                return False
            env[t.id] = r
        return True
    return False


Shape = tuple  # a rendered expression: (operation, operand, ...), nested; CONSTANT and free names as strings


def _called(func: ast.expr) -> str | None:
    """The name a call calls: `round`, `fractions.Fraction` -> Fraction."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _render(node: ast.AST, env: dict[str, Shape | str]) -> Shape | str:
    """One expression with names inlined and constants abstracted (see the module docstring)."""
    if isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)):
        return CONSTANT
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "quote":
        return CONSTANT
    if isinstance(node, ast.Call) and node.args and _called(node.func) in CONVERSIONS:
        return _render(node.args[0], env)
    if isinstance(node, ast.Name):
        return env.get(node.id, node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _FLAT):
        op = type(node.op).__name__
        parts: list[Shape | str] = []
        for side in (node.left, node.right):  # a + (b + c): one chain of operands, in no order
            shape = _render(side, env)
            parts += shape[1:] if isinstance(shape, tuple) and shape[0] == op else [shape]
        shape: Shape | str = (op, *sorted(parts, key=repr))
    elif isinstance(node, ast.AST):
        fields: list[Shape | str] = [type(node).__name__]
        for name, value in ast.iter_fields(node):
            if name == "ctx":
                continue
            if isinstance(value, list):
                fields.append(("list", *(_render(v, env) for v in value)))
            elif isinstance(value, ast.AST):
                fields.append(_render(value, env))
            elif value is not None:
                fields.append(repr(value))
        shape = tuple(fields)
    else:
        shape = repr(node)
    if len(repr(shape)) > MAX_CHARS:
        raise _TooLong
    return shape


class _Abstracted(ast.NodeTransformer):
    """Bound names to their order of first binding, imports and docstrings dropped, and with `constants`
    every constant to `C`."""

    def __init__(self, bound: dict[str, str], constants: bool = True):
        self.bound, self.constants = bound, constants

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Name(id=CONSTANT, ctx=ast.Load()) if self.constants else node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name(id=self.bound.get(node.id, node.id), ctx=node.ctx)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.arg(arg=self.bound.get(node.arg, node.arg))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.bound.get(node.name, node.name)
        return self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        return None if isinstance(node.value, ast.Constant) else self.generic_visit(node)


def _bound_names(tree: ast.Module) -> dict[str, str]:
    """Every name the program binds but `answer` (assignment targets, loop and comprehension variables,
    function names and arguments) to v0, v1, ... in the order a walk of the tree meets them (the same
    for two programs of one structure, whatever their names)."""
    order: dict[str, str] = {}
    for node in ast.walk(tree):
        name = (
            node.id
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
            else node.arg
            if isinstance(node, ast.arg)
            else node.name
            if isinstance(node, ast.FunctionDef)
            else None
        )
        if name is not None and name != ANSWER:
            order.setdefault(name, f"v{len(order)}")
    return order


def _dump(tree: ast.Module) -> str:
    """The canonical dump of a program whose bound names are already abstracted: constants to `C`."""
    return ast.dump(_Abstracted({}).visit(tree), annotate_fields=False)
