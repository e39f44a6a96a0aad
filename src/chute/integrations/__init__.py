"""Glue between chute's Loader and training frameworks (Hugging Face Trainer, ...)."""
