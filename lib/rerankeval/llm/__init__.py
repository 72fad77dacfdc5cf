"""The LLM plumbing every stage that asks a model shares: the OpenAI-compatible client, the reply cache,
schemas, reply repair and scrubbing, budgets and the local llama-server. May import rerankeval.corpus
and rerankeval.core."""
