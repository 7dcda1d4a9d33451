"""Analysis tools: closed forms, Hessian eigenvectors, alignment, dynamics."""
