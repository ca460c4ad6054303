"""Checkpoint import/export: `jaxlab.io.hf` reads and writes Hugging Face
Llama/Qwen2 safetensors checkpoints without torch; `jaxlab.io.gguf` (import
it by name: it is also the `python -m jaxlab.io.gguf` converter) reads
llama.cpp GGUF files into the same models."""

from jaxlab.io import hf
