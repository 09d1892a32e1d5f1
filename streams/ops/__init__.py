"""Operations: creating topics (`topics`) and the embedded Kafka broker (`broker`)."""
