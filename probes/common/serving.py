"""An OpenAI-compatible server's readiness, as a client sees it: what the lifecycle phase times (vllm serve to its
first answer) and the inference phase waits for before its sweep."""

import json
import urllib.request


def models_answer(port, timeout=2.0):
    """True when GET /v1/models answers 200 with a JSON list of models."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=timeout) as resp:
            return resp.status == 200 and isinstance(json.loads(resp.read()).get("data"), list)
    except (OSError, ValueError):
        return False
