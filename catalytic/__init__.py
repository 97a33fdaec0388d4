"""catalytic: an n-dimensional lattice computation engine.

>>> import catalytic as cat
>>> L = cat.Lattice(shape=(4, 4), periodic=True)
>>> int(L.distance_field(0).max())
4
"""

from catalytic import clusters, memory, ops, percolation, profiler
from catalytic.device import devices
from catalytic.batch import BatchError, BatchProcessor, BatchResult
from catalytic.chunked import ChunkedComponents, ChunkedLattice
from catalytic.engine import Engine, get_engine, reset_engine
from catalytic.hookspecs import hookimpl
from catalytic.errors import (
    CalibrationError,
    CatalyticError,
    CatalyticViolation,
    ConvergenceError,
    InsufficientMemoryError,
    NoBackendError,
    PluginError,
)
from catalytic.memory import get_monitor
from catalytic.lattice import Lattice, LatticeMetrics, UnifiedCatalyticLattice
from catalytic.results import (
    ClusterStatistics,
    Communities,
    Components,
    PathResult,
    SpanningClusters,
    Tortuosity,
    Transport,
)
from catalytic.profiler import get_profiler, profile
from catalytic.router import Decision

__version__ = "0.1.0"

__all__ = [
    "BatchError",
    "BatchProcessor",
    "BatchResult",
    "CalibrationError",
    "CatalyticError",
    "CatalyticViolation",
    "ChunkedComponents",
    "ChunkedLattice",
    "ClusterStatistics",
    "Communities",
    "Components",
    "ConvergenceError",
    "Decision",
    "Engine",
    "InsufficientMemoryError",
    "Lattice",
    "LatticeMetrics",
    "NoBackendError",
    "PathResult",
    "PluginError",
    "SpanningClusters",
    "Tortuosity",
    "Transport",
    "UnifiedCatalyticLattice",
    "get_engine",
    "get_monitor",
    "get_profiler",
    "clusters",
    "hookimpl",
    "memory",
    "ops",
    "percolation",
    "profile",
    "profiler",
    "devices",
    "reset_engine",
]
