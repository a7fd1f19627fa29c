"""Runtime: the JIT decorator and launcher, the CUDA driver layer, the interpreter."""
