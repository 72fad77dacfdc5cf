"""The LLM plumbing every stage that asks a model shares: the OpenAI-compatible client, the reply cache,
schemas, reply repair and scrubbing, budgets, the circuit breaker, the local llama-server, and the one cached
call with its one counter type (:mod:`.call`: ``CachedLLM.call`` and ``CallStats``). May import
rerankeval.corpus and rerankeval.core."""
