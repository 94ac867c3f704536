"""The worker pool now lives in the package (:mod:`mmport.pool`); kept for ``from pool import ...``."""

from mmport.pool import WorkerFailure, WorkerPool, add_pool_arguments, serve

__all__ = ["WorkerFailure", "WorkerPool", "add_pool_arguments", "serve"]
