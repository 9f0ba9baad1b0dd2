"""AMD ROCm: tilelang has no HIP backend; ``target.check_hip_availability`` says so to
programs that pick their warp size by it."""
