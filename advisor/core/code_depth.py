"""How deep TorchScript's parser and compiler would recurse on a piece of code, measured without recursing.

torch.jit.load parses a model's code with a recursive-descent parser and then walks the tree recursively, so any
expression shape that nests deep enough ends the process with SIGSEGV: not only brackets and prefix operators but
100,000 chained `x ** x ** ...`, `x + x + ...`, `a if c else ...`, comparisons, calls `f(x)(x)...`, subscripts
`x[0][0]...` or attribute chains `x.T.T...` (each crashes torch 2.13 between ~5,000 and ~20,000 levels; brackets
near 3,000).

`expression_depth_excess(code, limit)` bounds the depth of the tree torch would build, from above, in one pass over
the tokens (code with strings and comments already blanked, advisor.core.denied_ops): every bracket level holds a
count of the operators chained in its current element - binary, comparison, boolean and unary operators, `if`/`else`
of a conditional expression, `lambda`, `.`, and each call, subscript or parenthesised group applied in the chain -
and the depth at any point is the number of open brackets plus the counts along them. A comma, a colon, `=` or `;`
starts a sibling element (its count restarts) - except the colon of a `lambda`, whose body nests -, a newline
outside brackets a new statement. Torch-free.
"""

from __future__ import annotations

import re

# Far below every crash measured above, far above real code (a statement of torch.jit.save's output chains a few).
MAX_EXPRESSION_DEPTH = 500

_TOKEN = re.compile(
    r"""
    (?P<number>(?:\d[\w]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?[jJ]?)  # consumed so "1.5" and "1e-5" hold no operator
    | (?P<name>[A-Za-z_]\w*)
    | (?P<open>[(\[{])
    | (?P<close>[)\]}])
    | (?P<reset>,|;|:(?!=)|=(?!=))
    | (?P<operator>\*\*|//|<<|>>|<=|>=|==|!=|->|:=|[-+*/%@&|^~<>.!])
    """,
    re.VERBOSE,
)
_OPERATOR_WORDS = frozenset({"and", "or", "not", "in", "is", "if", "else", "lambda", "await"})


class _Chains:
    """Per open bracket (and the statement itself): how many operators are chained in its current element."""

    def __init__(self) -> None:
        self.chains = [0]
        self.chained = 0  # sum(chains)
        self.lambdas = [0]  # per open bracket: lambdas whose `:` is still to come (their body nests, not restarts)

    def at_top(self) -> bool:
        return len(self.chains) == 1

    def depth(self) -> int:
        return len(self.chains) - 1 + self.chained

    def feed(self, line: str, offset: int, limit: int) -> int | None:
        """The tokens of one line; the offset where the depth first passes `limit`, else None."""
        chains, lambdas = self.chains, self.lambdas
        for token in _TOKEN.finditer(line):
            kind = token.lastgroup
            word = token.group() if kind == "name" else ""
            if kind == "operator" or word in _OPERATOR_WORDS:
                chains[-1] += 1
                self.chained += 1
                lambdas[-1] += int(word == "lambda")
            elif kind == "open":
                chains.append(0)
                lambdas.append(0)
            elif kind == "close":
                if len(chains) > 1:
                    self.chained -= chains.pop()
                    lambdas.pop()
                chains[-1] += 1  # the call, subscript or group is one more link of the enclosing chain
                self.chained += 1
            elif kind == "reset" and token.group() == ":" and lambdas[-1]:
                lambdas[-1] -= 1  # a lambda's body: one level deeper, not a sibling
            elif kind == "reset":
                self.chained -= chains[-1]
                chains[-1] = 0
            else:
                continue
            if self.depth() > limit:
                return offset + token.start()
        return None

    def end_of_line(self, continued: bool) -> None:
        """A newline outside brackets (and not after a backslash) ends the statement."""
        if self.at_top() and not continued:
            self.chained = self.chains[0] = self.lambdas[0] = 0


def expression_depth_excess(code: str, limit: int = MAX_EXPRESSION_DEPTH) -> int | None:
    """The offset in `code` where the nesting first goes past `limit`, or None when it never does.

    A short line (at most `limit` characters, so at most that many tokens) that starts a statement and closes every
    bracket it opens is skipped unread: most lines of real code are, so only long or multi-line statements pay for
    the token loop. Such a line that closes a bracket before opening it does not parse in torch either (it stops at
    the stray bracket), so whatever the skipped line hides is never read by torch."""
    state = _Chains()
    offset = 0
    for line in code.split("\n"):
        continued = line.rstrip("\r").endswith("\\")
        short_statement = len(line) <= limit and not continued and _balanced(line)
        if not (state.at_top() and short_statement):
            hit = state.feed(line, offset, limit)
            if hit is not None:
                return hit
        state.end_of_line(continued)
        offset += len(line) + 1
    return None


def _balanced(line: str) -> bool:
    return all(line.count(opening) == line.count(closing) for opening, closing in ("()", "[]", "{}"))
