# zs_optimizer: server/optimizer*.cc
