"""The source stage: git (through GitPython), the pinned commit, patches, the CUDA root from wheels."""
