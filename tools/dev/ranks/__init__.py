"""Several GPUs of one host: the link's bandwidth curve (under torchrun), 05's and 07's scaling
predicted from N = 1 and 2, and 05's promises under torchrun checked on the GPUs."""
