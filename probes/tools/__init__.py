"""Tools: what the probes of the other phases need, found or installed on a fresh node (run after preflight).

tools_detect records what the node has (OS, packages, MPI, CUDA, ROCm, NCCL, GPU architecture) and which of the
packages the roles asked for are missing; tools_venv makes the probe Python (a venv with torch matched to the
node); tools_inference makes the inference phase's engine (vLLM, in a venv of its own); tools_build builds
nccl-tests, rccl-tests, nvbandwidth, IOR, elbencho and fio-http into the prefix. The system packages are installed
by the role itself (ansible.builtin.package), between the two tools_detect runs that show what it changed.

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers."""

PROBES = ("tools_detect", "tools_venv", "tools_inference", "tools_build")
