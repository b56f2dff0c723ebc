"""The functions of the switchyard binary that a callgrind profile saw run, hottest first (by
instructions executed in the function itself), one mangled symbol per line: the link order
`scripts/layout` writes to crates/switchyard/layout.txt.

Reads callgrind's own format: `ob=`/`fn=` (and `cob=`/`cfn=`) lines name the object and function,
`(id) name` the first time and `(id)` after; a cost line right after `calls=` is the cost of that
call (inclusive), not the function's own.
"""

import sys
from collections import defaultdict


def self_costs(path, totals):
    objects, functions = {}, {}
    current_object = current_function = None
    after_call = False

    def name(table, value):
        value = value.strip()
        if value.startswith("("):
            ident, _, rest = value.partition(")")
            rest = rest.strip()
            if rest:
                table[ident] = rest
            return table.get(ident, "")
        return value

    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.startswith("ob="):
                current_object = name(objects, line[3:])
            elif line.startswith("cob="):
                name(objects, line[4:])
            elif line.startswith("fn="):
                current_function = name(functions, line[3:])
            elif line.startswith("cfn="):
                name(functions, line[4:])
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) > 1 and current_object and current_object.endswith("/switchyard"):
                    totals[current_function] += int(fields[1])


def main():
    totals = defaultdict(int)
    for path in sys.argv[1:]:
        self_costs(path, totals)
    for function, cost in sorted(totals.items(), key=lambda item: (-item[1], item[0])):
        # Symbols only: callgrind names code without one `0x…`.
        if cost > 0 and function.startswith("_"):
            print(function)


if __name__ == "__main__":
    main()
