from fracnb_spawner.service.app import main

main()
