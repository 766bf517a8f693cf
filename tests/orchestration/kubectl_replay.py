#!/usr/bin/env python3
"""A REPLAY OF RECORDED kubectl RESPONSES -- not kubectl, and no API server behind it.

Stands in for kubectl in tests of the k8s_pods probe (no Kubernetes API server can run on the test machine): it
answers each call from a transcript of recorded responses (the JSON and text of real clusters, tests/fixtures/k8s,
see its README) and records every call it was asked, so a test runs the probe end to end against the recordings and
checks what the probe asked.

Environment:
  KUBECTL_REPLAY_TRANSCRIPT  the transcript (JSON), see below
  KUBECTL_REPLAY_STATE       a directory for the call log (calls.jsonl) kept between invocations

A call's key is its argument list joined by spaces, with any argument naming an existing file replaced by
"@<file name>" (the probe writes its manifests into a fresh directory). The transcript is
    {"fixtures": "<directory the response files are in, relative to the transcript>",
     "entries": [{"argv": "<key>", "when": [["<key>", n], ...], "responses": [<response>, ...]}, ...]}
and a response is {"file": "<fixture>"} (its content on stdout, rc 0), {"list": ["<fixture>", ...]} (those
objects in the v1 List kubectl prints for `get -l` and for `create -f` of a List; [] for none left), {"stdout":
"..."} or {"stderr": "...", "rc": 1}. Of the entries whose argv matches, the last one whose `when` holds (every
listed call made at least n times before this one) answers; its responses are given in order, the last one again
once they run out -- a pod polled after its delete gets the entry that says what the API said then. A call with no
entry gets rc 1 and a message, and is logged as unanswered.
"""

import json
import os
import sys


def key_of(argv):
    return " ".join("@" + os.path.basename(a) if os.path.isfile(a) else a for a in argv)


def main(argv):
    transcript_path = os.environ["KUBECTL_REPLAY_TRANSCRIPT"]
    state = os.environ["KUBECTL_REPLAY_STATE"]
    with open(transcript_path) as fh:
        transcript = json.load(fh)
    fixtures = os.path.join(os.path.dirname(transcript_path), transcript.get("fixtures", "."))
    log_path = os.path.join(state, "calls.jsonl")
    calls = []
    if os.path.exists(log_path):
        with open(log_path) as fh:
            calls = [json.loads(line) for line in fh if line.strip()]
    key = key_of(argv)
    made = {}
    for c in calls:
        made[c["key"]] = made.get(c["key"], 0) + 1
    chosen, index = None, None
    for i, entry in enumerate(transcript["entries"]):
        if entry["argv"] == key and all(made.get(k, 0) >= n for k, n in entry.get("when") or []):
            chosen, index = entry, i
    answered = sum(1 for c in calls if c.get("entry") == index) if chosen else 0
    with open(log_path, "a") as fh:
        fh.write(json.dumps({"key": key, "entry": index, "answered": chosen is not None}) + "\n")
    if chosen is None:
        sys.stderr.write("kubectl_replay: no recorded response for: %s\n" % key)
        return 1
    responses = chosen["responses"]
    resp = responses[min(answered, len(responses) - 1)]
    if "file" in resp:
        with open(os.path.join(fixtures, resp["file"])) as fh:
            sys.stdout.write(fh.read())
    if "list" in resp:
        objs = []
        for name in resp["list"]:
            with open(os.path.join(fixtures, name)) as fh:
                objs.append(json.load(fh))
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                     "items": objs}, indent=4) + "\n")
    sys.stdout.write(resp.get("stdout", ""))
    sys.stderr.write(resp.get("stderr", ""))
    return int(resp.get("rc", 0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
