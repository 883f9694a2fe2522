"""The systems bench.py compares ours with, each on the same token ids: ``reference``
(transformers, every context a full prompt; also the oracle), ``free_text`` (transformers greedy
generation, parsed), ``llama_cpp`` (llama-cpp-python on the GGUF). Each imports its heavy
dependency (torch, llama_cpp) only when used."""
