"""drillbook: executable resilience runbooks for AI-agent platforms, with tamper-evident evidence."""

__version__ = "0.1.0"
