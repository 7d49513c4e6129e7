from amqp_server.server import main

main()
