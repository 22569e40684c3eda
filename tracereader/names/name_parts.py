"""Reading a kernel's name apart: its function, the kernel a wrapper template holds, the
identifiers an Itanium-mangled name spells."""

from __future__ import annotations

import re
from functools import lru_cache

_ANONYMOUS = "(anonymous namespace)::"


# Wrappers whose template argument is the real kernel: cutlass::Kernel<cutlass_80_...>,
# cutlass::device_kernel<flash::FlashAttnBwd<...>>, cutlass_cudnn_train::Kernel<...>.
WRAPPERS = {"kernel", "kernel2", "device_kernel"}


_BUILTIN_TYPES = {"int", "long", "float", "double", "bool", "unsigned", "char", "short"}


class Parts:
    __slots__ = ("text", "function", "start", "end", "wrapped")

    def __init__(self, text: str, function: str, start: int, end: int, wrapped: str):
        self.text = text  # the name, demangled where it was mangled
        self.function = function  # qualified name: no return type, template args, parameters
        self.start = start  # where the function's name starts in text
        self.end = end  # where its parameter list starts (len(text) without one)
        self.wrapped = wrapped  # a wrapper's first template argument, up to its own '<'

    @property
    def base(self) -> str:
        return self.function.rsplit("::", 1)[-1]

    @property
    def subject(self) -> str:
        """What names the work: the wrapped kernel, else the function (its namespace kept
        where the function's own name is generic: internal::gemvx::kernel)."""
        if self.wrapped:
            return self.wrapped
        parts = self.function.split("::")
        return "::".join(parts[-2:]) if parts[-1].lower() in WRAPPERS else parts[-1]


@lru_cache(maxsize=4096)
def split_name(name: str) -> Parts:
    text = _demangle(name) if name.startswith("_Z") else name
    text = text.replace(_ANONYMOUS, "")
    depth, start, end, first_arg = 0, 0, len(text), None
    for i, ch in enumerate(text):
        if ch in "<{[" or (ch == "(" and depth):
            if ch == "<" and depth == 0 and first_arg is None:
                first_arg = i + 1
            depth += 1
        elif ch in ">}]" or (ch == ")" and depth):
            depth = max(depth - 1, 0)
        elif depth == 0 and ch == "(":
            end = i
            break
        elif depth == 0 and ch == " ":
            start, first_arg = i + 1, None  # what came before was a return type (void, ...)
    function = text[start:end]
    while True:  # drop template arguments and lambdas, innermost first
        stripped = re.sub(r"<[^<>]*>|\{[^{}]*\}", "", function)
        if stripped == function:
            break
        function = stripped
    function = function.strip() or short(text)
    wrapped = ""
    if first_arg is not None and function.rsplit("::", 1)[-1].lower() in WRAPPERS:
        wrapped = re.split(r"[<,>(\s]", text[first_arg:].lstrip(), maxsplit=1)[0]
        if not re.search(r"[A-Za-z]{3}", wrapped) or wrapped in _BUILTIN_TYPES:
            wrapped = ""
    return Parts(text, function, start, end, wrapped)


def _demangle(name: str) -> str:
    """Enough of an Itanium-mangled name to classify it, not a demangler: the identifiers it
    spells, `_ZN2at6native...` -> `at::native::...<...>`: the leading nested name, then every
    other identifier as if one template argument."""
    outer: list[str] = []
    inner: list[str] = []
    i, n = 2, len(name)
    in_prefix = True
    while i < n:
        ch = name[i]
        if ch.isdigit():
            j = i
            while j < n and name[j].isdigit():
                j += 1
            size = int(name[i:j])
            ident = name[j : j + size]
            if size and len(ident) == size and not ident.startswith("_GLOBAL__N"):
                (outer if in_prefix else inner).append(ident)
            i = j + size
            continue
        if ch == "L":  # a literal: L<type><value>E
            close = name.find("E", i + 1)
            i = close + 1 if close > 0 else n
            continue
        if ch in "ST" and (m := re.match(r"[ST][0-9A-Z]*_|St|Sa|Ss|Sb", name[i:])):
            i += m.end()  # a substitution or template parameter: names nothing new
            continue
        if ch in "NKV" and in_prefix:
            i += 1
            continue
        if outer:
            in_prefix = False
        i += 1
    head = "::".join(outer) or name
    return f"{head}<{'::'.join(inner)}>" if inner else head


def short(name: str) -> str:
    return name.removeprefix("void ").split("<")[0].split("(")[0]
