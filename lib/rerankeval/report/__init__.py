"""The HTML report: pages rendered from the Jinja templates in templates/, plots, HTML-safe helpers and
the run manifest. May import experiments and everything below it."""
