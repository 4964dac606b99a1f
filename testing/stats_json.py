#!/usr/bin/env python3
"""Checks one `paseo-sandbox stats --json` document against docs/stats.schema.json and prints
each sandbox as one line of space-separated fields, for testing/stats_test.cc:

    id state measured cpuCores processes memoryBytes memoryLimitBytes hostTasks outputBytes
    networkInBytes networkOutBytes

(a null cpuCores or network prints -1). Exit status 1, with the reason, if it does not validate.

    stats_json.py SCHEMA DOCUMENT
"""
import json
import sys

import jsonschema


def main():
    schema_path, document_path = sys.argv[1:3]
    with open(schema_path) as f:
        schema = json.load(f)
    with open(document_path) as f:
        text = f.read()
    lines = text.splitlines()
    if len(lines) != 1:
        print(f"expected one JSON line, got {len(lines)}: {text!r}")
        return 1
    document = json.loads(lines[0])
    try:
        jsonschema.validate(document, schema)
    except jsonschema.ValidationError as e:
        print(f"does not match the schema: {e.message} at {list(e.absolute_path)}")
        return 1
    for s in document["sandboxes"]:
        network = s["network"] or {"inBytes": -1, "outBytes": -1}
        cores = -1 if s["cpuCores"] is None else s["cpuCores"]
        print(s["id"], s["state"], int(s["measured"]), cores, s["processes"], s["memoryBytes"],
              s["memoryLimitBytes"], s["hostTasks"], s["outputBytes"], network["inBytes"],
              network["outBytes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
