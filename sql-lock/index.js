'use strict'
// `deadbolt/sql-lock`: sql-lock 0.1.3's exports (initialize, getLock, transaction) plus
// deadbolt's close, DLMError and DLMErrorTypes, so that changing require('sql-lock') to
// require('deadbolt/sql-lock') is the whole migration. The same functions as deadbolt's root
// exports of those names (one shared configuration).

const { initialize, getLock, transaction, close, DLMError, DLMErrorTypes } = require('../compat/sql-lock')

module.exports = {
  initialize,
  getLock,
  transaction,
  close,
  DLMError,
  DLMErrorTypes,
}
