"""No import runs in a circle between machine_lsp's modules, inside a folder either (issue 21): where two modules
need the same thing, it lives in a module below both. Every import counts — at module level, inside a function and
under `TYPE_CHECKING` (grimp reads them all) — so hiding an import in a function does not pass.

A pure graph check (grimp, installed with import-linter, no cache): no module is imported or run.
"""

from __future__ import annotations

import grimp

# Circles known and not yet broken, each with why (a frozenset of module names per circle). Remove a line when its
# circle is gone (the test says so).
KNOWN: set[frozenset[str]] = set()  # none left


def _circles(imports: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_circle_finder_finds_a_circle_and_nothing_else() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(imports) == [frozenset({"a", "b", "c"})]


def test_no_module_imports_itself_back_through_others() -> None:
    graph = grimp.build_graph("machine_lsp", include_external_packages=False, cache_dir=None)
    imports = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    circles = set(_circles(imports))
    new = [sorted(circle) for circle in circles - KNOWN]
    assert not new, f"import circles (move what both need into a module below them): {new}"
    gone = [sorted(circle) for circle in KNOWN - circles]
    assert not gone, f"these circles are gone: remove them from KNOWN: {gone}"
