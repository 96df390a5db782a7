"""What the eight detectors of ``bench_redaction`` cost on one large text full of escapes.

The detectors read a text holding an encoding twice, as it is and decoded (``detectors_decoding``),
so text that is escaped throughout (JSON-escaped source, HTML, a list of URLs) is where that layer
costs. Variants, each the eight detectors over one text, a new ``str`` object every call (the
detectors keep what they found for the text last seen, by identity: a new object is a first sight):

- ``source``: 13 KB of plain Python source (no escapes: the floor);
- ``json``: the same source JSON-escaped (``\\n`` and ``\\"`` throughout);
- ``html``: 20 KB of HTML with ``&amp;`` and ``&nbsp;``;
- ``urls``: 400 URLs with ``%20``, 20 KB;
- ``prompt``: ``bench_redaction``'s 2 KB prompt (no escapes, a few values);
- ``accented``: that prompt with accented words (not ASCII: it goes through the decoding layer).

CPU-time medians when run, and instructions per call counted by valgrind (``--count <variant> N``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import instructions
from benchmarks.bench_core import ROUNDS, _line, compare_sync
from benchmarks.bench_redaction import DETECTORS, prompt_2kb
from relay_runtime.detectors import detector


def python_source() -> str:
    """13 KB of Python source: definitions, strings, numbers, no escapes."""
    parts = ['"""A generated module."""\n\nfrom __future__ import annotations\n\nimport re\n\n']
    i = 0
    while sum(map(len, parts)) < 13_000:
        parts.append(
            f"def handler_{i}(request: dict[str, object], limit: int = {100 + i}) -> list[str]:\n"
            f'    """Answer request {i}: the items over the limit, "sorted" by name."""\n'
            f'    items = [str(x) for x in request.get("items_{i}", [])]\n'
            f"    if len(items) > limit * {i % 7 + 2}:\n"
            f'        raise ValueError(f"too many items: {{len(items)}} > {{limit}}")\n'
            f"    return sorted(items, key=lambda s: (len(s), s))  # version 1.{i}.0\n\n\n"
        )
        i += 1
    return "".join(parts)[:13_000]


def json_escaped() -> str:
    """The source as a JSON string's body: ``\\n`` and ``\\"`` throughout."""
    return json.dumps(python_source())[1:-1]


def html_page() -> str:
    """20 KB of HTML, ``&amp;`` in links and prose, ``&nbsp;`` between words and in prices."""
    rows = []
    i = 0
    while sum(map(len, rows)) < 20_000:
        rows.append(
            f'<tr><td><a href="/items?id={i}&amp;page={i % 9}&amp;sort=asc">Item&nbsp;{i}</a></td>'
            f"<td>Tools &amp; parts, {i % 50}&nbsp;pcs</td><td>{i * 3 % 1000}.{i % 100:02d}&nbsp;EUR</td></tr>\n"
        )
        i += 1
    return ("<html><body><table>\n" + "".join(rows))[:20_000]


def url_list() -> str:
    """400 URLs with ``%20`` in their paths and queries, 20 KB."""
    urls = [
        f"https://docs.example.com/guides/Getting%20Started%20{i}.html?q=export%20job%20{i % 13}&v=2\n"
        for i in range(400)
    ]
    return "".join(urls)[:20_000]


def accented_prompt() -> str:
    """The 2 KB prompt with a few words written with accents, as a French or German customer would."""
    words = {
        "summarise": "résumé",
        "customer": "Kundin",
        "export": "exportée",
        "upgrade": "mise à jour",
        "three": "drei Mal (dreimal)",
    }
    text = prompt_2kb()
    for plain, accented in words.items():
        text = text.replace(plain, accented)
    return (text + " Grüße, Zoë Müller-Lüdenscheidt, Straße des 17. Juni, Café Crème.")[:2048]


TEXTS: dict[str, Callable[[], str]] = {
    "source": python_source,
    "json": json_escaped,
    "html": html_page,
    "urls": url_list,
    "prompt": prompt_2kb,
    "accented": accented_prompt,
}


def _variants() -> dict[str, Callable[[], Any]]:
    found = [detector(name).find for name in DETECTORS]

    def scan(text: str) -> Callable[[], Any]:
        head, tail = text[:1], text[1:]

        def call() -> Any:
            fresh = head + tail  # a new object: nothing kept for the last text applies
            return [find(fresh) for find in found]

        return call

    return {name: scan(make()) for name, make in TEXTS.items()}


def main() -> None:
    print(f"python {sys.version.split()[0]}; medians of {ROUNDS} samples", flush=True)
    variants = _variants()
    times = compare_sync(variants, n=20)
    print(f"{len(DETECTORS)} detectors over one text, a new text object every call")
    for name, make in TEXTS.items():
        _line(f"{name} ({len(make()):,} characters)", times[name])
    if instructions.available():
        instructions.report("benchmarks.bench_detectors", list(TEXTS), calls=10, baseline="source")


def count(variant: str, n: int) -> None:
    """``instructions``' entry: warm up, then ``n`` calls of a variant."""
    instructions.counted(_variants()[variant], n, warm=3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        count(sys.argv[2], int(sys.argv[3]))
    else:
        main()
