"""Contract tests of vLLM's own CPU offloading (type VLLMOffloading), read in the
releases' source."""
