#!/usr/bin/env python3
"""Expand haar's differential corpus with pymetkit (metkit's MARS language) and print JSON.

Usage: python3 expand.py [corpus.txt]  ->  JSON list on stdout, one entry per case:
    {"case": text, "ok": bool, "requests": [{"verb": str, "values": {keyword: [value, ...]}}],
     "error": str | null}
The Rust test tests/pymetkit.rs runs this script and compares with haar's own expansion.
"""

import json
import os
import sys

import pymetkit


def cases(text):
    """Cases separated by lines holding only '%%'; full-line comments outside cases dropped."""
    out, current = [], []
    for line in text.splitlines():
        if line.strip() == "%%":
            out.append("\n".join(current))
            current = []
        else:
            current.append(line)
    out.append("\n".join(current))
    return [c.strip() for c in out if c.strip() and not all(
        l.strip().startswith("#") or not l.strip() for l in c.splitlines())]


def strip_leading_comments(case):
    lines = case.splitlines()
    while lines and lines[0].lstrip().startswith("#"):
        lines.pop(0)
    return "\n".join(lines).strip()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus.txt")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # metkit's C++ code prints diagnostics on stdout: send fd 1 to stderr while it runs and
    # keep the real stdout for the JSON.
    sys.stdout.flush()
    json_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    results = []
    for case in cases(text):
        case = strip_leading_comments(case)
        source = case[1:] if case.startswith("!") else case
        entry = {"case": case, "ok": True, "requests": [], "error": None}
        try:
            for request in pymetkit.parse_mars_request(source):
                values = {}
                for keyword in request.keys():
                    v = request[keyword]
                    values[keyword] = [str(x) for x in v] if isinstance(v, list) else [str(v)]
                entry["requests"].append({"verb": request.verb(), "values": values})
        except Exception as error:  # pymetkit raises MetKitException (a RuntimeError)
            entry["ok"] = False
            entry["error"] = str(error).splitlines()[0][:300]
        results.append(entry)
    json.dump(results, json_out, indent=1)
    json_out.write("\n")
    json_out.close()


if __name__ == "__main__":
    main()
