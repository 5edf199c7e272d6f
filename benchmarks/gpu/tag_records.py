"""Print the JSON-lines records of FILE, each tagged with the tree it ran on and the command
that made it (the before/after scripts of benchmarks/gpu append the output to their record).

    python3 benchmarks/gpu/tag_records.py FILE TREE "COMMAND" >> RECORD
"""
import json
import sys

path, tree, cmd = sys.argv[1:4]
for line in open(path):
    r = json.loads(line)
    r["tree"], r["command"] = tree, f"{cmd} (tree: {tree})"
    print(json.dumps(r))
