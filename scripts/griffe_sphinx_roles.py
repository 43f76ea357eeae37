"""A griffe extension for the API pages: Sphinx roles in docstrings become links.

The docstrings are Google style but cross-reference with Sphinx roles (``:func:`audit```,
``:class:`~ldp_audit.errors.BudgetExceeded```), which mkdocstrings would show as literal text.
Each role is resolved in the scope of the object whose docstring holds it (griffe's own name
resolution: members, imports, then the enclosing scopes) and becomes an *optional* autorefs
link: a link where the target has a rendered anchor, plain code where it has none (a private
helper, an object without a docstring), never a broken link and never the literal role.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const|ref|type):`(?P<tilde>~?)(?P<target>[^`]+)`"
)


def _resolve(obj: griffe.Object, target: str) -> str | None:
    target = target.strip().removesuffix("()").lstrip(".")
    if target.startswith("ldp_audit."):
        return target
    head, _, rest = target.partition(".")
    scope: Any = obj
    while scope is not None:
        try:
            path = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            scope = scope.parent
            continue
        return f"{path}.{rest}" if rest else path
    return None


def _rewrite(obj: griffe.Object, text: str) -> str:
    def one(m: re.Match[str]) -> str:
        target = m.group("target").strip()
        shown = target.removesuffix("()").split(".")[-1] if m.group("tilde") else target
        code = f"<code>{html.escape(shown)}</code>"
        path = _resolve(obj, target)
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the loaded package (see the module doc)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        stack: list[Any] = [pkg]
        seen: set[int] = set()
        while stack:
            obj = stack.pop()
            if id(obj) in seen or obj.is_alias:
                continue
            seen.add(id(obj))
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = _rewrite(obj, obj.docstring.value)
            stack.extend(obj.members.values())
