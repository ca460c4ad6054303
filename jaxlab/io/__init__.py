"""Checkpoint import/export: `jaxlab.io.hf` reads and writes Hugging Face
Llama/Qwen2 safetensors checkpoints without torch."""

from jaxlab.io import hf
