"""Phase: inference. A real serving engine (vLLM) under an InferenceX-style sweep, on one node and across nodes.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers: engine (the server's command lines and readiness), job (the rank side: an engine per node,
the sweep on the first), loadgen (vLLM's own `vllm bench serve`, run point by point in the engine's Python),
tiny_model (the random-weight model of the CPU path)."""

PROBES = ("inference",)
