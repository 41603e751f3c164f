# zs_server, zeroshard-server
