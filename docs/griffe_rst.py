"""A griffe extension that lets the API pages render the reStructuredText bits of this project's docstrings.

The docstrings are written for ``help()`` and Sphinx-style readers: ``:math:`...```, ``.. math::`` blocks,
``:class:`~pkg.Name``` roles and ``>>>`` examples. mkdocstrings renders docstrings as Markdown, where those
would show up literally. This extension rewrites them when griffe loads an object, before rendering:

* ``:math:`x``` becomes ``$x$`` and a ``.. math::`` block becomes a ``$$ ... $$`` block (MathJax through
  ``pymdownx.arithmatex``);
* ``:class:`~a.b.C``` (and ``:func:``, ``:meth:``, ``:mod:``, ``:attr:``, ``:data:``) becomes the code span
  ```C``` (the full dotted path without ``~``); no cross-reference is made, so a renamed target cannot break
  the strict build;
* a run of ``>>>`` lines becomes a fenced ``pycon`` block.

Only the rendered copy changes; the source files are not touched.
"""

from __future__ import annotations

import re

import griffe

_MATH = re.compile(r":math:`([^`]+)`")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")


def _role(m: "re.Match[str]") -> str:
    target = m.group(2)
    if m.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _blocks(text: str) -> str:
    """``.. math::`` directives and ``>>>`` runs to Markdown blocks."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        pad = line[: _indent(line)]
        if stripped.startswith(".. math::"):
            body = [stripped[len(".. math::"):].strip()]
            i += 1
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(pad)):
                body.append(lines[i].strip())
                i += 1
            while body and not body[-1]:
                body.pop()
            out += [pad + "$$", *(pad + b for b in body if b), pad + "$$", ""]
            continue
        if stripped.startswith(">>>"):
            out.append(pad + "```pycon")
            while i < len(lines) and lines[i].lstrip().startswith((">>>", "...")):
                out.append(pad + lines[i].lstrip())
                i += 1
            out += [pad + "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rewrite(text: str) -> str:
    """The Markdown form of one docstring (see the module docstring)."""
    text = _blocks(text)
    text = _MATH.sub(lambda m: f"${m.group(1).strip()}$", text)
    return _ROLE.sub(_role, text)


class RestructuredTextRoles(griffe.Extension):
    """Rewrites every docstring as it is loaded."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:  # noqa: D102 - griffe's hook
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
