"""tilelang's passes: each a TVM ``transform.Pass`` factory that can be run on its own."""

from .inject_pipeline import InjectSoftwarePipeline  # noqa: F401
from .lower_kernel_launch import LowerKernelLaunch  # noqa: F401
from .lower_tile_ops import LowerTileOps  # noqa: F401
from .pass_config import PassConfigKey  # noqa: F401
