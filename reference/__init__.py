"""The oracle: the classic full-vocabulary path, independent of ``sharded/``."""
