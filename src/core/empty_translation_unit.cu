// Placeholder translation unit: keeps a CUDA library target valid while its folders are empty.
