"""tilelang's passes: each a TVM ``transform.Pass`` factory that can be run on its own."""

from .elide_proxy_fences import ElideProxyFences  # noqa: F401
from .inject_async_waits import InjectAsyncWaits  # noqa: F401
from .inject_pipeline import InjectSoftwarePipeline  # noqa: F401
from .inject_thread_sync import InjectThreadSync  # noqa: F401
from .layout_inference import LayoutInference  # noqa: F401
from .lower_async_resources import LowerAsyncResources  # noqa: F401
from .lower_kernel_launch import LowerKernelLaunch  # noqa: F401
from .lower_parallel_loops import LowerParallelLoops  # noqa: F401
from .lower_tile_ops import LowerTileOps  # noqa: F401
from .negative_index import LegalizeNegativeIndex  # noqa: F401
from .plan_shared_memory import PlanSharedMemory  # noqa: F401
from .pass_config import PassConfigKey  # noqa: F401
